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
		var mu, rstd float64
		if tp.rounding.Stats == StatsFloat64 {
			mu, rstd = standardizeRow(x, eps)
			for j, v := range x {
				y[j] = float32((float64(v) - mu) * rstd)
			}
		} else {
			m, r := tp.standardizeRow32(x, eps)
			for j, v := range x {
				y[j] = (v - m) * r
			}
			mu, rstd = float64(m), float64(r)
		}
		if nd != nil {
			nd.saved = append(nd.saved, mu, rstd)
		}
	}
	return tp.store(out)
}

// standardizeRow32 returns the mean of x and 1/sqrt(σ² + eps) computed in
// float32 as Rounding.Stats says: pairwise sums, the variance in two
// passes or in one (mean(x²) − mean(x)², clamped at 0).
func (tp *Tape) standardizeRow32(x []float32, eps float64) (mu, rstd float32) {
	n := float32(len(x))
	mu = pairwise32(x) / n
	sq := tp.f32(len(x))
	for j, v := range x {
		if tp.rounding.Stats == StatsOnePass32 {
			sq[j] = v * v
		} else {
			sq[j] = (v - mu) * (v - mu)
		}
	}
	v := pairwise32(sq) / n
	if tp.rounding.Stats == StatsOnePass32 {
		v = max(v-float32(mu*mu), 0)
	}
	return mu, float32(1 / math.Sqrt(float64(v+float32(eps))))
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
	if tp.rounding.Stats != StatsFloat64 {
		tp.backwardStandardize32(nd)
		return
	}
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

// backwardStandardize32 is backwardStandardize in float32 (Rounding.Stats),
// from the saved float32 mean and 1/σ, with pairwise sums.
func (tp *Tape) backwardStandardize32(nd *node) {
	a, g := nd.a, nd.out.Grad
	n := a.Cols
	buf := tp.f32(2 * n)
	yh, gy := buf[:n], buf[n:]
	for i := 0; i < a.Rows; i++ {
		x, gi, da := a.Data[i*n:(i+1)*n], g[i*n:(i+1)*n], a.Grad[i*n:(i+1)*n]
		mu, rstd := float32(nd.saved[2*i]), float32(nd.saved[2*i+1])
		for j, v := range x {
			yh[j] = (v - mu) * rstd
			gy[j] = gi[j] * yh[j]
		}
		mg, mgy := pairwise32(gi)/float32(n), pairwise32(gy)/float32(n)
		for j := range da {
			da[j] += float32(rstd * (gi[j] - mg - float32(yh[j]*mgy)))
		}
	}
}

// RMSNorm returns each row of x divided by its root mean square and
// multiplied by the 1×Cols gain: y_j = x_j·r·gain_j with
// r = 1/sqrt(mean_j x_j² + eps) (docs/spec.md §5). It is one operation in
// place of the chain
//
//	Mul(Mul(x, Rsqrt(AddScalar(Mean(Mul(x, x), 1), eps))), gain)
//
// and gives that chain's bits, forward and backward: the same float32 and
// float64 roundings in the same order, −0 turned into +0 where the chain
// added a term into a zeroed gradient. It keeps r per row instead of five
// intermediate tensors and their gradients, which at small widths cost more
// than the arithmetic (docs/performance.md). It panics if gain is not
// 1×Cols.
func (tp *Tape) RMSNorm(x, gain *Tensor, eps float32) *Tensor {
	if gain.Rows != 1 || gain.Cols != x.Cols {
		panic(fmt.Sprintf("autograd.RMSNorm: x is %s, gain is %s: want gain 1x%d", x.shape(), gain.shape(), x.Cols))
	}
	out := tp.alloc(x.Rows, x.Cols, needsGrad(x, gain))
	var nd *node
	if out.Grad != nil {
		nd = tp.push(opRMSNorm, out, x, gain)
	}
	if tp.rounding.RMSDivide {
		tp.rmsNormDivide(nd, x, gain, out, eps)
		return tp.store(out)
	}
	n := x.Cols
	scale := 1 / float64(n)
	for i := 0; i < x.Rows; i++ {
		xi, y := x.Data[i*n:(i+1)*n], out.Data[i*n:(i+1)*n]
		var acc float64
		for _, v := range xi {
			acc += float64(float32(v * v))
		}
		ms := float32(acc*scale) + eps
		r := float32(1 / math.Sqrt(float64(ms)))
		for j, v := range xi {
			y[j] = float32(v*r) * gain.Data[j]
		}
		if nd != nil {
			nd.saved = append(nd.saved, float64(r))
		}
	}
	return tp.store(out)
}

// plusZero returns v + 0: the value a term takes when the chain RMSNorm
// replaces added it into a gradient that was still zero (−0 becomes +0).
func plusZero(v float32) float32 { return v + 0 }

// backwardRMSNorm differentiates RMSNorm as its chain would, node by node in
// reverse: the gain's gradient Σ_i g_ij·float32(x_ij·r_i) in float64 over
// rows (added directly when x has one row, as the chain did); then, per row, dxr = g⊙gain, dx += dxr·r, dr = Σ_j dxr_j·x_j,
// dms = dr·(−r³/2) (Rsqrt's derivative), dsq = dms/n in float32, and
// dx += dsq·x twice (once for each operand of x⊙x).
func (tp *Tape) backwardRMSNorm(nd *node) {
	x, gain, g := nd.a, nd.b, nd.out.Grad
	if tp.rounding.RMSDivide {
		tp.backwardRMSNormDivide(nd)
		return
	}
	n := x.Cols
	switch {
	case gain.Grad != nil && x.Rows == 1:
		// One row: the chain's last product had operands of the same
		// shape and added its terms to the gain's gradient directly.
		r := float32(nd.saved[0])
		for j, v := range g {
			gain.Grad[j] += float32(v * float32(x.Data[j]*r))
		}
	case gain.Grad != nil:
		acc := tp.f64(n)
		for i := 0; i < x.Rows; i++ {
			r := float32(nd.saved[i])
			xi, gi := x.Data[i*n:(i+1)*n], g[i*n:(i+1)*n]
			for j, v := range gi {
				acc[j] += float64(float32(v * float32(xi[j]*r)))
			}
		}
		for j, v := range acc {
			gain.Grad[j] += float32(v)
		}
	}
	if x.Grad == nil {
		return
	}
	scale := float32(1 / float64(n))
	for i := 0; i < x.Rows; i++ {
		r := float32(nd.saved[i])
		xi, gi, dx := x.Data[i*n:(i+1)*n], g[i*n:(i+1)*n], x.Grad[i*n:(i+1)*n]
		var acc float64
		for j, v := range gi {
			d := plusZero(float32(v * gain.Data[j]))
			dx[j] += float32(d * r)
			acc += float64(float32(d * xi[j]))
		}
		rr := float64(r)
		dms := plusZero(plusZero(float32(float64(plusZero(float32(acc))) * (-0.5 * rr * rr * rr))))
		dsq := plusZero(float32(scale * dms))
		for j, v := range xi {
			t := float32(dsq * v)
			dx[j] += t
			dx[j] += t
		}
	}
}

// storeFunc returns Rounding.Store, or the identity when it is unset: the
// rounding of a tensor an implementation stores.
func (tp *Tape) storeFunc() func(float32) float32 {
	if f := tp.rounding.Store; f != nil {
		return f
	}
	return func(v float32) float32 { return v }
}

// rmsNormDivide is RMSNorm's forward pass under Rounding.RMSDivide: per
// row, s = sqrt(mean(x⊙x) + eps) and y = (x / s)⊙gain, each operation's
// output in float32 and stored (Rounding.Store), the mean a pairwise sum
// divided by the width, as PyTorch computes the chain
// x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain. It saves s
// per row on nd; the caller stores out.
func (tp *Tape) rmsNormDivide(nd *node, x, gain, out *Tensor, eps float32) {
	st := tp.storeFunc()
	n := x.Cols
	sq := tp.f32(n)
	for i := 0; i < x.Rows; i++ {
		xi, y := x.Data[i*n:(i+1)*n], out.Data[i*n:(i+1)*n]
		for j, v := range xi {
			sq[j] = st(float32(v * v))
		}
		ms := st(st(pairwise32(sq)/float32(n)) + eps)
		s := st(float32(math.Sqrt(float64(ms))))
		for j, v := range xi {
			y[j] = float32(st(v/s) * gain.Data[j])
		}
		if nd != nil {
			nd.saved = append(nd.saved, float64(s))
		}
	}
}

// backwardRMSNormDivide differentiates rmsNormDivide's chain as PyTorch's
// autograd does, each intermediate gradient stored (Rounding.Store): the
// gain's gradient the pairwise sum over rows of g⊙(x / s); per row,
// dq = g⊙gain, dx += dq / s from the division's numerator,
// ds = Σ_j −dq_j·((x_j / s) / s) from its denominator, the square root's
// dms = ds / (2s), the mean's dsq = dms / n, and dx += dsq·x + dsq·x from
// the square's two operands.
func (tp *Tape) backwardRMSNormDivide(nd *node) {
	x, gain, g := nd.a, nd.b, nd.out.Grad
	st := tp.storeFunc()
	n := x.Cols
	if gain.Grad != nil {
		terms := tp.f32(x.Rows)
		for j := range gain.Grad {
			for i := range terms {
				s := float32(nd.saved[i])
				terms[i] = st(float32(g[i*n+j] * st(x.Data[i*n+j]/s)))
			}
			gain.Grad[j] += st(pairwise32(terms))
		}
	}
	if x.Grad == nil {
		return
	}
	buf := tp.f32(2 * n) // one tape buffer: a second call would return the same
	dq, prod := buf[:n], buf[n:]
	for i := 0; i < x.Rows; i++ {
		s := float32(nd.saved[i])
		xi, gi, dx := x.Data[i*n:(i+1)*n], g[i*n:(i+1)*n], x.Grad[i*n:(i+1)*n]
		for j, v := range gi {
			dq[j] = st(float32(v * gain.Data[j]))
			prod[j] = st(float32(-dq[j] * st(st(xi[j]/s)/s)))
		}
		ds := st(pairwise32(prod))
		dms := st(ds / st(float32(2*s)))
		dsq := st(dms / float32(n))
		for j, v := range xi {
			t := st(float32(dsq * v))
			dx[j] += st(dq[j] / s)
			dx[j] += st(t + t)
		}
	}
}
