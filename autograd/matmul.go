package autograd

import (
	"fmt"

	"github.com/modref/modref/autograd/internal/kernel"
	"github.com/viterin/vek/vek32"
)

// MatMul returns the matrix product a·b of an m×k and a k×n tensor.
func (tp *Tape) MatMul(a, b *Tensor) *Tensor {
	if a.Cols != b.Rows {
		panic(fmt.Sprintf("autograd.MatMul: a is %s, b is %s: a.Cols must equal b.Rows", a.shape(), b.shape()))
	}
	out := tp.alloc(a.Rows, b.Cols, needsGrad(a, b))
	kernel.MatMulNN(out.Data, a.Data, b.Data, a.Rows, a.Cols, b.Cols)
	if out.Grad != nil {
		tp.push(opMatMul, out, a, b)
	}
	return out
}

// MatMulNT returns a·bᵀ for an m×k tensor a and an n×k tensor b, without
// forming bᵀ. Attention scores Q·Kᵀ are computed this way.
func (tp *Tape) MatMulNT(a, b *Tensor) *Tensor {
	if a.Cols != b.Cols {
		panic(fmt.Sprintf("autograd.MatMulNT: a is %s, b is %s: a.Cols must equal b.Cols", a.shape(), b.shape()))
	}
	out := tp.alloc(a.Rows, b.Rows, needsGrad(a, b))
	kernel.MatMulNT(out.Data, a.Data, b.Data, a.Rows, a.Cols, b.Rows)
	if out.Grad != nil {
		tp.push(opMatMulNT, out, a, b)
	}
	return out
}

// MatMulTN returns aᵀ·b for a k×m tensor a and a k×n tensor b, without
// forming aᵀ. It sums over the rows (tokens) of both operands.
func (tp *Tape) MatMulTN(a, b *Tensor) *Tensor {
	if a.Rows != b.Rows {
		panic(fmt.Sprintf("autograd.MatMulTN: a is %s, b is %s: a.Rows must equal b.Rows", a.shape(), b.shape()))
	}
	out := tp.alloc(a.Cols, b.Cols, needsGrad(a, b))
	kernel.MatMulTN(out.Data, a.Data, b.Data, a.Cols, a.Rows, b.Cols)
	if out.Grad != nil {
		tp.push(opMatMulTN, out, a, b)
	}
	return out
}

// backwardMatMul differentiates the three products with the other two
// kernels, so that no transpose is ever formed:
//
//	C = A·B:   dA = dC·Bᵀ (NT), dB = Aᵀ·dC (TN)
//	C = A·Bᵀ:  dA = dC·B  (NN), dB = dCᵀ·A (TN)
//	C = Aᵀ·B:  dA = B·dCᵀ (NT), dB = A·dC  (NN)
func (tp *Tape) backwardMatMul(nd *node) {
	a, b, g := nd.a, nd.b, nd.out.Grad
	c := nd.out
	if a.Grad != nil {
		tmp := tp.f32(a.Len())
		switch nd.op {
		case opMatMul:
			kernel.MatMulNT(tmp, g, b.Data, a.Rows, c.Cols, a.Cols)
		case opMatMulNT:
			kernel.MatMulNN(tmp, g, b.Data, a.Rows, c.Cols, a.Cols)
		case opMatMulTN:
			kernel.MatMulNT(tmp, b.Data, g, a.Rows, b.Cols, a.Cols)
		}
		vek32.Add_Inplace(a.Grad, tmp)
	}
	if b.Grad != nil {
		tmp := tp.f32(b.Len())
		switch nd.op {
		case opMatMul:
			kernel.MatMulTN(tmp, a.Data, g, b.Rows, a.Rows, b.Cols)
		case opMatMulNT:
			kernel.MatMulTN(tmp, g, a.Data, b.Rows, a.Rows, b.Cols)
		case opMatMulTN:
			kernel.MatMulNN(tmp, a.Data, g, b.Rows, a.Cols, b.Cols)
		}
		vek32.Add_Inplace(b.Grad, tmp)
	}
}
