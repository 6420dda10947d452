package autograd

import (
	"fmt"

	"github.com/viterin/vek/vek32"
)

// MatMul returns the matrix product a·b of an m×k and a k×n tensor.
func (tp *Tape) MatMul(a, b *Tensor) *Tensor {
	if a.Cols != b.Rows {
		panic(fmt.Sprintf("autograd.MatMul: a is %s, b is %s: a.Cols must equal b.Rows", a.shape(), b.shape()))
	}
	a, b = tp.operand(a), tp.operand(b)
	out := tp.alloc(a.Rows, b.Cols, needsGrad(a, b))
	if tp.accumulates(a.Rows, a.Cols, b.Cols) {
		productInFormat(out.Data, a.Data, b.Data, a.Rows, a.Cols, b.Cols, false, tp.rounding.Result)
	} else {
		tp.kernels().MatMulNN(out.Data, a.Data, b.Data, a.Rows, a.Cols, b.Cols)
	}
	if out.Grad != nil {
		tp.push(opMatMul, out, a, b)
	}
	return tp.result(out)
}

// MatMulNT returns a·bᵀ for an m×k tensor a and an n×k tensor b, without
// forming bᵀ. Attention scores Q·Kᵀ are computed this way.
func (tp *Tape) MatMulNT(a, b *Tensor) *Tensor {
	if a.Cols != b.Cols {
		panic(fmt.Sprintf("autograd.MatMulNT: a is %s, b is %s: a.Cols must equal b.Cols", a.shape(), b.shape()))
	}
	a, b = tp.operand(a), tp.operand(b)
	out := tp.alloc(a.Rows, b.Rows, needsGrad(a, b))
	tp.kernels().MatMulNT(out.Data, a.Data, b.Data, a.Rows, a.Cols, b.Rows)
	if out.Grad != nil {
		tp.push(opMatMulNT, out, a, b)
	}
	return tp.result(out)
}

// MatMulTN returns aᵀ·b for a k×m tensor a and a k×n tensor b, without
// forming aᵀ. It sums over the rows (tokens) of both operands.
func (tp *Tape) MatMulTN(a, b *Tensor) *Tensor {
	if a.Rows != b.Rows {
		panic(fmt.Sprintf("autograd.MatMulTN: a is %s, b is %s: a.Rows must equal b.Rows", a.shape(), b.shape()))
	}
	a, b = tp.operand(a), tp.operand(b)
	out := tp.alloc(a.Cols, b.Cols, needsGrad(a, b))
	tp.kernels().MatMulTN(out.Data, a.Data, b.Data, a.Cols, a.Rows, b.Cols)
	if out.Grad != nil {
		tp.push(opMatMulTN, out, a, b)
	}
	return tp.result(out)
}

// backwardMatMul differentiates the three products with the other two
// kernels, so that no transpose is ever formed:
//
//	C = A·B:   dA = dC·Bᵀ (NT), dB = Aᵀ·dC (TN)
//	C = A·Bᵀ:  dA = dC·B  (NN), dB = dCᵀ·A (TN)
//	C = Aᵀ·B:  dA = B·dCᵀ (NT), dB = A·dC  (NN)
//
// A gradient no operation has added into yet (a tape tensor's own, stale
// buffer) receives its product directly instead of through a work buffer
// and an addition into zeros: the kernels start every sum from +0 and so
// never give −0, which makes the product the bits of 0 + product
// (TestProductsAreNeverNegativeZero in the kernel package).
func (tp *Tape) backwardMatMul(nd *node) {
	a, b, g := nd.a, nd.b, nd.out.Grad
	c := nd.out
	if a.Grad != nil {
		dst, direct := tp.gradDestination(a)
		switch nd.op {
		case opMatMul:
			tp.kernels().MatMulNT(dst, g, b.Data, a.Rows, c.Cols, a.Cols)
		case opMatMulNT:
			tp.kernels().MatMulNN(dst, g, b.Data, a.Rows, c.Cols, a.Cols)
		case opMatMulTN:
			tp.kernels().MatMulNT(dst, b.Data, g, a.Rows, b.Cols, a.Cols)
		}
		if !direct {
			vek32.Add_Inplace(a.Grad, dst)
		}
	}
	if b.Grad != nil {
		dst, direct := tp.gradDestination(b)
		switch nd.op {
		case opMatMul:
			if tp.accumulates(b.Rows, a.Rows, b.Cols) {
				productInFormat(dst, a.Data, g, b.Rows, a.Rows, b.Cols, true, tp.rounding.Result)
			} else {
				tp.kernels().MatMulTN(dst, a.Data, g, b.Rows, a.Rows, b.Cols)
			}
		case opMatMulNT:
			tp.kernels().MatMulTN(dst, g, a.Data, b.Rows, a.Rows, b.Cols)
		case opMatMulTN:
			tp.kernels().MatMulNN(dst, a.Data, g, b.Rows, a.Cols, b.Cols)
		}
		if !direct {
			vek32.Add_Inplace(b.Grad, dst)
		}
	}
}

// gradDestination returns where a product that is t's gradient term goes:
// t's own gradient, and direct, if it is stale (a tape tensor's own buffer,
// not a view's, that nothing has added into yet), which it then no longer
// is; or else a work buffer to be added into t's gradient, made fresh.
func (tp *Tape) gradDestination(t *Tensor) (dst []float32, direct bool) {
	if t.stale {
		t.stale = false
		return t.Grad, true
	}
	t.freshGrad()
	return tp.f32(t.Len()), false
}
