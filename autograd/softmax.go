package autograd

import (
	"github.com/modref/modref/internal/elem"

	"github.com/modref/modref/autograd/internal/kernel"
)

// Softmax returns the softmax of each row: y_j = exp(x_j) / Σ_k exp(x_k),
// computed after subtracting the row maximum so that it cannot overflow.
// Entries of -Inf (masked) get probability 0; a row that is all -Inf gives NaN.
func (tp *Tape) Softmax(a *Tensor) *Tensor { return tp.softmax(opSoftmax, a) }

// LogSoftmax returns the logarithm of each row's softmax,
// y_j = x_j - log Σ_k exp(x_k), computed without overflow.
func (tp *Tape) LogSoftmax(a *Tensor) *Tensor { return tp.softmax(opLogSoftmax, a) }

func (tp *Tape) softmax(op opcode, a *Tensor) *Tensor {
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	e := tp.f64(a.Cols)
	for i := 0; i < a.Rows; i++ {
		x, y := a.Data[i*a.Cols:(i+1)*a.Cols], out.Data[i*a.Cols:(i+1)*a.Cols]
		m, sum := rowExpSum(x, e)
		if op == opSoftmax {
			kernel.DivToFloat32(y, e, sum)
		} else {
			lse := m + elem.Log(sum)
			for j, v := range x {
				y[j] = float32(float64(v) - lse)
			}
		}
	}
	if out.Grad != nil {
		tp.push(op, out, a, nil)
	}
	return tp.store(out)
}

// rowExpSum sets e_j = exp(x_j - max x) and returns max x and Σ e_j.
func rowExpSum(x []float32, e []float64) (m, sum float64) {
	// A NaN is never the maximum here, unlike with math.Max, but it makes
	// its exponential and so the sum NaN all the same. The sum adds the
	// exponentials in order.
	m = kernel.Max(x)
	return m, kernel.ExpShiftedSum(e, x, m)
}

func (tp *Tape) backwardSoftmax(nd *node) {
	a, y, g := nd.a, nd.out.Data, nd.out.Grad
	if a.Grad == nil {
		return
	}
	cols := a.Cols
	var e []float64 // exp(y_j) of a row of log-softmax
	if nd.op != opSoftmax {
		e = tp.f64(cols)
	}
	for i := 0; i < a.Rows; i++ {
		yi, gi, da := y[i*cols:(i+1)*cols], g[i*cols:(i+1)*cols], a.Grad[i*cols:(i+1)*cols]
		var s float64
		if nd.op == opSoftmax {
			// dx_j = y_j (g_j - Σ_k g_k y_k)
			for k, v := range gi {
				s += float64(float64(v) * float64(yi[k]))
			}
			for j := range da {
				da[j] += float32(float64(yi[j]) * (float64(gi[j]) - s))
			}
		} else {
			// dx_j = g_j - exp(y_j) Σ_k g_k
			for _, v := range gi {
				s += float64(v)
			}
			kernel.ExpShifted(e, yi, 0) // exp(y_j − 0) = exp(y_j)
			for j := range da {
				da[j] += float32(float64(gi[j]) - float64(e[j]*s))
			}
		}
	}
}
