package autograd

import (
	"fmt"
	"math"

	"github.com/modref/modref/internal/elem"
	"github.com/viterin/vek/vek32"
)

// broadcast says how the right operand of a binary operation is applied.
type broadcast uint8

const (
	bcSame   broadcast = iota // same shape as the left operand
	bcRow                     // 1×Cols, the same row for every row
	bcCol                     // Rows×1, one value across each row
	bcScalar                  // 1×1
)

// broadcastOf classifies b against a, panicking with both shapes if b fits
// none of the broadcast forms.
func broadcastOf(op string, a, b *Tensor) broadcast {
	switch {
	case b.Rows == a.Rows && b.Cols == a.Cols:
		return bcSame
	case b.Rows == 1 && b.Cols == 1:
		return bcScalar
	case b.Rows == 1 && b.Cols == a.Cols:
		return bcRow
	case b.Rows == a.Rows && b.Cols == 1:
		return bcCol
	}
	panic(fmt.Sprintf("autograd.%s: cannot broadcast %s to %s (want same shape, 1x%d, %dx1 or 1x1)",
		op, b.shape(), a.shape(), a.Cols, a.Rows))
}

// bRow returns the part of b that applies to row i of a: a whole row for
// bcSame and bcRow, or nil together with the scalar for bcCol and bcScalar.
func bRow(b *Tensor, bc broadcast, i int) ([]float32, float32) {
	switch bc {
	case bcSame:
		return b.Data[i*b.Cols : (i+1)*b.Cols], 0
	case bcRow:
		return b.Data, 0
	case bcCol:
		return nil, b.Data[i]
	}
	return nil, b.Data[0]
}

// Add returns a + b, with b broadcast as described in the package comment.
func (tp *Tape) Add(a, b *Tensor) *Tensor { return tp.binary(opAdd, "Add", a, b) }

// Sub returns a - b, with b broadcast as described in the package comment.
func (tp *Tape) Sub(a, b *Tensor) *Tensor { return tp.binary(opSub, "Sub", a, b) }

// Mul returns the elementwise product a ⊙ b, with b broadcast as described in
// the package comment.
func (tp *Tape) Mul(a, b *Tensor) *Tensor { return tp.binary(opMul, "Mul", a, b) }

func (tp *Tape) binary(op opcode, name string, a, b *Tensor) *Tensor {
	bc := broadcastOf(name, a, b)
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a, b))
	for i := 0; i < a.Rows; i++ {
		o, x := out.Data[i*a.Cols:(i+1)*a.Cols], a.Data[i*a.Cols:(i+1)*a.Cols]
		y, s := bRow(b, bc, i)
		switch {
		case op == opAdd && y != nil:
			vek32.Add_Into(o, x, y)
		case op == opAdd:
			vek32.AddNumber_Into(o, x, s)
		case op == opSub && y != nil:
			vek32.Sub_Into(o, x, y)
		case op == opSub:
			vek32.SubNumber_Into(o, x, s)
		case op == opMul && y != nil:
			vek32.Mul_Into(o, x, y)
		default:
			vek32.MulNumber_Into(o, x, s)
		}
	}
	if out.Grad != nil {
		tp.push(op, out, a, b).arg = int(bc)
	}
	return tp.store(out)
}

// backwardBinary differentiates Add, Sub and Mul.
func (tp *Tape) backwardBinary(nd *node) {
	a, b, g := nd.a, nd.b, nd.out.Grad
	bc := broadcast(nd.arg)
	cols := a.Cols
	if a.Grad != nil {
		if nd.op != opMul {
			vek32.Add_Inplace(a.Grad, g)
		} else {
			tmp := tp.f32(cols)
			for i := 0; i < a.Rows; i++ {
				gi := g[i*cols : (i+1)*cols]
				if y, s := bRow(b, bc, i); y != nil {
					vek32.Mul_Into(tmp, gi, y)
				} else {
					vek32.MulNumber_Into(tmp, gi, s)
				}
				vek32.Add_Inplace(a.Grad[i*cols:(i+1)*cols], tmp)
			}
		}
	}
	if b.Grad == nil {
		return
	}
	// term(k) is the contribution of output element k to ∂/∂b.
	term := g
	if nd.op == opMul {
		term = tp.f32(len(g))
		vek32.Mul_Into(term, g, a.Data)
	}
	sign := 1.0
	if nd.op == opSub {
		sign = -1
	}
	if bc == bcSame {
		if sign > 0 {
			vek32.Add_Inplace(b.Grad, term)
		} else {
			vek32.Sub_Inplace(b.Grad, term)
		}
		return
	}
	acc := tp.f64(b.Len())
	if r := tp.rounding.Store; r != nil && tp.rounding.NormSums && nd.rowSumsInFormat && bc == bcRow {
		// Row by row in the format: s = r(s + r(term)) from s = 0.
		for i := 0; i < a.Rows; i++ {
			for j, v := range term[i*cols : (i+1)*cols] {
				acc[j] = float64(r(float32(acc[j]) + r(v)))
			}
		}
	} else {
		sumTerms(acc, term, a.Rows, cols, bc)
	}
	for k, v := range acc {
		b.Grad[k] += float32(sign * v)
	}
}

// sumTerms adds term, a rows×cols gradient, into acc over the dimension a
// broadcast bc repeats b along, in float64.
func sumTerms(acc []float64, term []float32, rows, cols int, bc broadcast) {
	for i := 0; i < rows; i++ {
		for j, v := range term[i*cols : (i+1)*cols] {
			switch bc {
			case bcRow:
				acc[j] += float64(v)
			case bcCol:
				acc[i] += float64(v)
			default:
				acc[0] += float64(v)
			}
		}
	}
}

// NormAffine returns x ⊙ gain + bias, gain and bias 1×cols: LayerNorm's
// affine map, Add(Mul(x, gain), bias) with the same bits. Under
// Rounding.NormSums the gain's and the bias's gradients are summed over
// the rows in the Store format, s = r(s + r(term)), as PyTorch's native
// layer_norm backward sums them on a CPU in pure bf16 (docs/tolerances.md,
// "Products accumulated in bf16"); otherwise in float64, as every
// broadcast operand's.
func (tp *Tape) NormAffine(x, gain, bias *Tensor) *Tensor {
	y := tp.Mul(x, gain)
	tp.sumRowsInFormat(y)
	out := tp.Add(y, bias)
	tp.sumRowsInFormat(out)
	return out
}

// sumRowsInFormat marks the node that made t, when one was recorded, to
// sum its broadcast operand's gradient in the Store format.
func (tp *Tape) sumRowsInFormat(t *Tensor) {
	if n := len(tp.nodes); t.Grad != nil && n > 0 && tp.nodes[n-1].out == t {
		tp.nodes[n-1].rowSumsInFormat = true
	}
}

// Scale returns s·a.
func (tp *Tape) Scale(a *Tensor, s float32) *Tensor {
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	vek32.MulNumber_Into(out.Data, a.Data, s)
	if out.Grad != nil {
		tp.push(opScale, out, a, nil).scale = s
	}
	return tp.store(out)
}

// AddScalar returns a + s elementwise.
func (tp *Tape) AddScalar(a *Tensor, s float32) *Tensor {
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	vek32.AddNumber_Into(out.Data, a.Data, s)
	if out.Grad != nil {
		tp.push(opAddScalar, out, a, nil)
	}
	return tp.store(out)
}

// Exp returns eˣ elementwise.
func (tp *Tape) Exp(a *Tensor) *Tensor { return tp.unary(opExp, a) }

// Log returns the natural logarithm elementwise.
func (tp *Tape) Log(a *Tensor) *Tensor { return tp.unary(opLog, a) }

// Sqrt returns √x elementwise.
func (tp *Tape) Sqrt(a *Tensor) *Tensor { return tp.unary(opSqrt, a) }

// Rsqrt returns 1/√x elementwise.
func (tp *Tape) Rsqrt(a *Tensor) *Tensor { return tp.unary(opRsqrt, a) }

// Sigmoid returns the logistic function σ(x) = 1/(1+e⁻ˣ) elementwise.
func (tp *Tape) Sigmoid(a *Tensor) *Tensor { return tp.unary(opSigmoid, a) }

// SiLU returns x·σ(x) elementwise.
func (tp *Tape) SiLU(a *Tensor) *Tensor { return tp.unary(opSiLU, a) }

// GELU returns the erf form of the Gaussian error linear unit,
// x·Φ(x) = x/2·(1 + erf(x/√2)), elementwise. Unlike the other pointwise
// functions it is evaluated in float32 (gelu.go), within a few float32
// roundings of the float64 value.
func (tp *Tape) GELU(a *Tensor) *Tensor { return tp.unary(opGELU, a) }

func (tp *Tape) unary(op opcode, a *Tensor) *Tensor {
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	if op == opGELU {
		geluForward(out.Data, a.Data)
	} else {
		for i, x := range a.Data {
			out.Data[i] = float32(unaryForward(op, float64(x)))
		}
	}
	if out.Grad != nil {
		tp.push(op, out, a, nil)
	}
	return tp.store(out)
}

// sigmoid is the logistic function, evaluated without overflow.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + elem.Exp(-x))
	}
	e := elem.Exp(x)
	return e / (1 + e)
}

func unaryForward(op opcode, x float64) float64 {
	switch op {
	case opExp:
		return elem.Exp(x)
	case opLog:
		return elem.Log(x)
	case opSqrt:
		return math.Sqrt(x)
	case opRsqrt:
		return 1 / math.Sqrt(x)
	case opSigmoid:
		return sigmoid(x)
	case opSiLU:
		return x * sigmoid(x)
	}
	panic("autograd: unaryForward of a non-unary op")
}

// unaryDerivative returns dy/dx at x, where y is the rounded forward value.
func unaryDerivative(op opcode, x, y float64) float64 {
	switch op {
	case opExp:
		return y
	case opLog:
		return 1 / x
	case opSqrt:
		return 0.5 / y
	case opRsqrt:
		return -0.5 * y * y * y
	case opSigmoid:
		return y * (1 - y)
	case opSiLU:
		s := sigmoid(x)
		return s * (1 + float64(x*(1-s)))
	}
	panic("autograd: unaryDerivative of a non-unary op")
}

// backwardUnary differentiates Scale, AddScalar and the pointwise functions.
func (tp *Tape) backwardUnary(nd *node) {
	a, g := nd.a, nd.out.Grad
	if a.Grad == nil {
		return
	}
	switch nd.op {
	case opAddScalar:
		vek32.Add_Inplace(a.Grad, g)
	case opScale:
		for i, v := range g {
			a.Grad[i] += float32(nd.scale * v)
		}
	case opGELU:
		geluBackward(a.Grad, g, a.Data)
	default:
		y := nd.out.Data
		for i, x := range a.Data {
			a.Grad[i] += float32(float64(g[i]) * unaryDerivative(nd.op, float64(x), float64(y[i])))
		}
	}
}
