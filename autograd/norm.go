package autograd

import (
	"fmt"
	"math"
)

// Standardize returns each row of a centred and scaled to unit variance,
// y_j = (x_j − μ) / sqrt(σ² + eps), with the row mean μ = mean_j x_j and the
// biased variance σ² = mean_j (x_j − μ)²: the normalisation inside
// LayerNorm (docs/spec.md §5). μ, σ² and y are computed in float64 from the
// float32 inputs and y is rounded once, so a row whose entries are nearly
// equal (σ ≪ |μ|) keeps its accuracy; a float32 x − μ would lose the digits
// that σ lives in. It panics if eps is negative.
func (tp *Tape) Standardize(a *Tensor, eps float64) *Tensor {
	if eps < 0 || math.IsNaN(eps) {
		panic(fmt.Sprintf("autograd.Standardize: a is %dx%d: eps %v must be non-negative", a.Rows, a.Cols, eps))
	}
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	var nd *node
	if out.Grad != nil {
		nd = tp.push(opStandardize, out, a, nil)
	}
	n := a.Cols
	for i := 0; i < a.Rows; i++ {
		x, y := a.Data[i*n:(i+1)*n], out.Data[i*n:(i+1)*n]
		mu, rstd := standardizeRow(x, eps)
		for j, v := range x {
			y[j] = float32((float64(v) - mu) * rstd)
		}
		if nd != nil {
			nd.saved = append(nd.saved, mu, rstd)
		}
	}
	return out
}

// standardizeRow returns the mean of x and 1/sqrt(σ² + eps), accumulated in
// float64 in index order.
func standardizeRow(x []float32, eps float64) (mu, rstd float64) {
	for _, v := range x {
		mu += float64(v)
	}
	mu /= float64(len(x))
	var ss float64
	for _, v := range x {
		d := float64(v) - mu
		ss += float64(d * d)
	}
	return mu, 1 / math.Sqrt(ss/float64(len(x))+eps)
}

// backwardStandardize adds dx_j = rstd·(g_j − mean(g) − ŷ_j·mean(g⊙ŷ)), with
// ŷ = (x − μ)·rstd recomputed in float64 from the saved μ and rstd.
func (tp *Tape) backwardStandardize(nd *node) {
	a, g := nd.a, nd.out.Grad
	if a.Grad == nil {
		return
	}
	n := a.Cols
	for i := 0; i < a.Rows; i++ {
		x, gi, da := a.Data[i*n:(i+1)*n], g[i*n:(i+1)*n], a.Grad[i*n:(i+1)*n]
		mu, rstd := nd.saved[2*i], nd.saved[2*i+1]
		var sg, sgy float64
		for j, v := range gi {
			yh := (float64(x[j]) - mu) * rstd
			sg += float64(v)
			sgy += float64(float64(v) * yh)
		}
		mg, mgy := sg/float64(n), sgy/float64(n)
		for j := range da {
			yh := (float64(x[j]) - mu) * rstd
			da[j] += float32(rstd * (float64(gi[j]) - mg - float64(yh*mgy)))
		}
	}
}
