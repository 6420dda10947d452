package ref

import (
	"math"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/ref/internal/prod"
)

// The block's backward pass, each step beside the forward step of seq.go
// it inverts (llm.c's layout): plain loops and prod.Mul, shapes in
// comments, n tokens. Gradients of parameters are added into a
// BlockParams of the parameters' shapes (zeroBlockLike); gradients of
// activations are returned.

// zeroMat returns a zero matrix of m's shape, or nil for nil.
func zeroMat(m *mat.Dense) *mat.Dense {
	if m == nil {
		return nil
	}
	r, c := m.Dims()
	return mat.NewDense(r, c, nil)
}

// zeroVec returns a zero vector of v's length, or nil for nil.
func zeroVec(v []float64) []float64 {
	if v == nil {
		return nil
	}
	return make([]float64, len(v))
}

// zeroBlockLike returns zero gradients of p's parameters, nil where p's are
// nil.
func zeroBlockLike(p *BlockParams) BlockParams {
	return BlockParams{
		Norm1: zeroVec(p.Norm1), Norm1Bias: zeroVec(p.Norm1Bias),
		Wq: zeroMat(p.Wq), Wk: zeroMat(p.Wk), Wv: zeroMat(p.Wv), Wo: zeroMat(p.Wo),
		Bq: zeroVec(p.Bq), Bk: zeroVec(p.Bk), Bv: zeroVec(p.Bv),
		Norm2: zeroVec(p.Norm2), Norm2Bias: zeroVec(p.Norm2Bias),
		W1: zeroMat(p.W1), W2: zeroMat(p.W2), W3: zeroMat(p.W3),
	}
}

// addXtY adds xᵀ·y into dw (d_in×d_out), x being n×d_in and y n×d_out:
// the gradient of a weight W of y = x·W.
func addXtY(dw *mat.Dense, x, y []float64, n int) {
	din, dout := dw.Dims()
	prod.Mul(din, dout, n, prod.Matrix{Data: x, Stride: din, T: true}, rowsOf(y, dout), dw.RawMatrix().Data, dout, true)
}

// mulWt returns dy·Wᵀ (n×d_in) for dy n×d_out: the gradient of the input x
// of y = x·W; with add it is added into into instead.
func mulWt(dy []float64, n int, w *mat.Dense, into []float64) []float64 {
	din, dout := w.Dims()
	add := into != nil
	if !add {
		into = make([]float64, n*din)
	}
	prod.Mul(n, din, dout, rowsOf(dy, dout), prod.Matrix{Data: w.RawMatrix().Data, Stride: w.RawMatrix().Stride, T: true}, into, din, add)
	return into
}

// NormBackward returns dL/dx of y = N(x), the norm of block configuration
// c with gain gamma and bias beta (nil under RMSNorm), for the rows of x
// given dy (both n×d), and adds the gain's and the bias's gradients into
// dgamma and dbeta (nil under RMSNorm): the block's own norm backward.
func NormBackward(c spec.BlockConfig, gamma, beta []float64, x, dy *mat.Dense, dgamma, dbeta []float64) *mat.Dense {
	n, d := x.Dims()
	xs := rawRows(x)
	_, st := normRows(c, gamma, beta, xs, n, d)
	return mat.NewDense(n, d, normBackward(c, signed, dgamma, dbeta, gamma, xs, st, rawRows(dy), n, d))
}

// normBackward returns dL/dx of y = N(x) for the n rows of x (n×d) given
// dy, and adds the gain's (and bias's) gradients into dgamma (and dbeta).
//
//	RMSNorm, y = x·inv·γ, inv = (Σx²/d + ε)^(−1/2):
//	  dγ_j += dy_j x_j inv,  dx_j = dy_j γ_j inv − x_j inv³ (Σ_k dy_k γ_k x_k)/d
//	LayerNorm, x̂ = (x − mean)·inv, y = x̂·γ + β:
//	  dβ_j += dy_j,  dγ_j += dy_j x̂_j,  g = dy·γ,
//	  dx_j = inv (g_j − mean(g) − x̂_j mean(g·x̂))
//
// Under the squares arithmetic (arith) every factor is squared and every
// difference a sum.
func normBackward(c spec.BlockConfig, a arith, dgamma, dbeta, gamma, x []float64, st normStats, dy []float64, n, d int) []float64 {
	dx := make([]float64, n*d)
	dd := float64(d)
	for i := 0; i < n; i++ {
		xi, dyi, dxi := x[i*d:(i+1)*d], dy[i*d:(i+1)*d], dx[i*d:(i+1)*d]
		inv := st.inv[i]
		if c.Norm == spec.NormLayer {
			mean := st.mean[i]
			mg, mgx := 0.0, 0.0
			for j, v := range xi {
				xh := float64((v - mean) * inv)
				g := float64(dyi[j] * a.f(gamma[j]))
				dbeta[j] += dyi[j]
				dgamma[j] += a.acc2(dyi[j], xh)
				mg += g
				mgx += float64(g * a.f(xh))
			}
			mg /= a.f(dd)
			mgx /= a.f(dd)
			for j, v := range xi {
				xh := float64((v - mean) * inv)
				g := float64(dyi[j] * a.f(gamma[j]))
				dxi[j] = float64(a.f(inv) * a.sub(a.sub(g, mg), float64(a.f(xh)*mgx)))
			}
			continue
		}
		s := 0.0
		for j, v := range xi {
			s += float64(dyi[j] * a.f(gamma[j]) * a.f(v))
			dgamma[j] += a.acc3(dyi[j], v, inv)
		}
		fi := a.f(inv)
		k := float64(fi*fi*fi) * s / a.f(dd)
		for j, v := range xi {
			dxi[j] = a.sub(float64(dyi[j]*a.f(gamma[j])*fi), float64(a.f(v)*k))
		}
	}
	return dx
}

// rotateBack applies the transpose of RoPE's rotation (rotate) in place to
// the gradient g of one rotated head vector: for u'_j = a cos − b sin,
// u'_{j+h} = b cos + a sin, da = g_j cos + g_{j+h} sin and
// db = g_{j+h} cos − g_j sin.
func rotateBack(ar arith, g, cs []float64) {
	half := len(g) / 2
	for j := 0; j < half; j++ {
		cos, sin := ar.f(cs[2*j]), ar.f(cs[2*j+1])
		a, b := g[j], g[j+half]
		g[j] = float64(a*cos) + float64(b*sin)
		g[j+half] = ar.sub(float64(b*cos), float64(a*sin))
	}
}

// addBiasGrad adds into db (nil: no bias) the gradient of a bias added to
// every row of y, whose rows are len(db) wide: the column sums of dy, rows
// in ascending order.
func addBiasGrad(db, dy []float64) {
	if db == nil {
		return
	}
	for i := 0; i < len(dy); i += len(db) {
		for j := range db {
			db[j] += dy[i+j]
		}
	}
}

// attentionBackward returns dL/dx of the attention update a (attentionForward)
// given da (n×d), adding the gradients of N1, Wq, Wk, Wv (and their
// biases) and Wo into g.
// p holds the weights as a multiplies by them (arith.weights).
func attentionBackward(c spec.BlockConfig, a arith, p, g *BlockParams, ac *blockActs, da []float64) []float64 {
	n, d := ac.n, ac.d
	// a = ctx·Wo
	a.addXtY(g.Wo, ac.ctx, da, n)
	dctx := mulWt(da, n, p.Wo, nil) // n×d
	kvh, kvw := c.KVHeadCount(), c.KVWidth()
	dq, dk, dv := make([]float64, n*d), make([]float64, n*kvw), make([]float64, n*kvw)
	lo := ac.windowStarts(c)
	// The query heads of a group add into their key and value head's
	// gradients one after the other, in ascending order: the same bits on
	// any number of goroutines.
	group := c.Heads / kvh
	forEach(kvh, n*n*d, func(j int) {
		for h := j * group; h < (j+1)*group; h++ {
			attendHeadBackward(c, a, ac, lo, h, dctx, dq, dk, dv)
		}
	})
	dh := d / c.Heads
	if c.Positions == spec.PositionRoPE {
		for i := 0; i < n; i++ {
			cs := ropeAngles(dh, ac.rot[i], c.RoPEBase)
			for h := 0; h < c.Heads; h++ {
				rotateBack(a, dq[i*d+h*dh:i*d+(h+1)*dh], cs)
			}
			for h := 0; h < kvh; h++ {
				rotateBack(a, dk[i*kvw+h*dh:i*kvw+(h+1)*dh], cs)
			}
		}
	}
	// q, k, v = u1·Wq + bq, u1·Wk + bk, u1·Wv + bv
	addBiasGrad(g.Bq, dq)
	addBiasGrad(g.Bk, dk)
	addBiasGrad(g.Bv, dv)
	a.addXtY(g.Wq, ac.u1, dq, n)
	a.addXtY(g.Wk, ac.u1, dk, n)
	a.addXtY(g.Wv, ac.u1, dv, n)
	du1 := mulWt(dq, n, p.Wq, nil)
	mulWt(dk, n, p.Wk, du1)
	mulWt(dv, n, p.Wv, du1)
	return normBackward(c, a, g.Norm1, g.Norm1Bias, p.Norm1, ac.x, ac.n1, du1, n, d)
}

// attendHeadBackward adds head h's gradients of q, k and v (before the
// rotation's backward) into dq (n×d, head h's columns), dk and dv
// (n×kv_heads·d_h, the columns of key and value head kvHead(c, h)), given
// dctx (n×d). For each block of queries, with P its probabilities
// (headProbs) over the keys lo[i0]..i1-1:
//
//	dP = dctx·Vᵀ,  dS_it = P_it (dP_it − Σ_t' P_it' dP_it') · scale
//	dV += Pᵀ·dctx,  dQ = dS·K,  dK += dSᵀ·Q
func attendHeadBackward(c spec.BlockConfig, a arith, ac *blockActs, lo []int, h int, dctx, dq, dk, dv []float64) {
	n, d := ac.n, ac.d
	q, k, v := a.rows(ac.q), a.rows(ac.k), a.rows(ac.v)
	dh, kvw := d/c.Heads, c.KVWidth()
	scale := 1 / math.Sqrt(float64(dh))
	col, kvCol := h*dh, kvHead(c, h)*dh
	buf := make([]float64, attentionBlock*n)
	ds := make([]float64, attentionBlock*n)
	for i0 := 0; i0 < n; i0 += attentionBlock {
		i1 := min(i0+attentionBlock, n)
		bn := i1 - i0
		k0 := lo[i0]
		nk := ac.keyEnd(i1-1) - k0
		pr := a.rows(headProbs(c, ac, lo, h, i0, i1, buf)) // bn×nk
		dctxB := prod.Matrix{Data: dctx[i0*d+col:], Stride: d}
		dp := ds[:bn*nk]
		prod.Mul(bn, nk, dh, dctxB, prod.Matrix{Data: v[k0*kvw+kvCol:], Stride: kvw, T: true}, dp, nk, false)
		for i := i0; i < i1; i++ {
			pi, dpi := pr[(i-i0)*nk:(i-i0+1)*nk], dp[(i-i0)*nk:(i-i0+1)*nk]
			dot := 0.0
			for t := lo[i] - k0; t < ac.keyEnd(i)-k0; t++ {
				dot += float64(pi[t] * dpi[t])
			}
			for t := range dpi {
				if t < lo[i]-k0 || t >= ac.keyEnd(i)-k0 {
					dpi[t] = 0
					continue
				}
				dpi[t] = float64(pi[t]*a.sub(dpi[t], dot)) * a.f(scale)
			}
		}
		prod.Mul(nk, dh, bn, prod.Matrix{Data: pr, Stride: nk, T: true}, dctxB, dv[k0*kvw+kvCol:], kvw, true)
		prod.Mul(bn, dh, nk, rowsOf(dp, nk), prod.Matrix{Data: k[k0*kvw+kvCol:], Stride: kvw}, dq[i0*d+col:], d, false)
		prod.Mul(nk, dh, bn, prod.Matrix{Data: dp, Stride: nk, T: true}, prod.Matrix{Data: q[i0*d+col:], Stride: d}, dk[k0*kvw+kvCol:], kvw, true)
	}
}

// geluGrad is GELU'(v) = Φ(v) + v φ(v).
func geluGrad(v float64) float64 {
	phi := elem.Exp(-0.5*float64(v*v)) / math.Sqrt(2*math.Pi)
	return float64(0.5*(1+elem.Erf(v/math.Sqrt2))) + float64(v*phi)
}

// siluGrad is SiLU'(v) = σ(v) (1 + v (1 − σ(v))).
func siluGrad(v float64) float64 {
	s := Sigmoid(v)
	return s * (1 + float64(v*(1-s)))
}

// mlpBackward returns dL/dh of the MLP half m = MLP(N2(h)) (mlpForward)
// given dm (n×d), adding the gradients of N2, W1, W2 (and W3) into g.
// p holds the weights as a multiplies by them (arith.weights).
func mlpBackward(c spec.BlockConfig, a arith, p, g *BlockParams, ac *blockActs, dm []float64) []float64 {
	du2 := mlpCoreBackward(c, a, p, g, ac, dm)
	return normBackward(c, a, g.Norm2, g.Norm2Bias, p.Norm2, ac.h, ac.n2, du2, ac.n, ac.d)
}

// mlpCoreBackward returns dL/du of the MLP m = MLP(u) (mlpCore, u = ac.u2)
// given dm (n×d), adding the gradients of W1, W2 (and W3) into g.
// p holds the weights as a multiplies by them (arith.weights).
func mlpCoreBackward(c spec.BlockConfig, a arith, p, g *BlockParams, ac *blockActs, dm []float64) []float64 {
	n, f := ac.n, ac.dff
	// m = act·W2
	a.addXtY(g.W2, ac.act, dm, n)
	dact := mulWt(dm, n, p.W2, nil) // n×d_ff
	dpre := make([]float64, n*f)
	if c.MLP == spec.ActSwiGLU {
		// act = SiLU(pre)·gate
		dgate := make([]float64, n*f)
		for j, v := range ac.pre {
			dgate[j] = float64(dact[j] * a.f(SiLU(v)))
			dpre[j] = float64(dact[j]*a.f(ac.gate[j])) * a.f(siluGrad(v))
		}
		a.addXtY(g.W3, ac.u2, dgate, n)
		du := mulWt(dgate, n, p.W3, nil)
		a.addXtY(g.W1, ac.u2, dpre, n)
		return mulWt(dpre, n, p.W1, du)
	}
	// act = GELU(pre)
	for j, v := range ac.pre {
		dpre[j] = float64(dact[j] * a.f(geluGrad(v)))
	}
	a.addXtY(g.W1, ac.u2, dpre, n)
	return mulWt(dpre, n, p.W1, nil)
}

// blockBackward returns dL/dx of the block's update f = a + m
// (blockForward) given df (n×d), adding every parameter's gradient into g:
// h = x + a and m = MLP(N2(h)), so dh = MLP's backward of df, da = df + dh
// and dx = dh + the attention's backward of da.
// p holds the weights as a multiplies by them (arith.weights).
func blockBackward(c spec.BlockConfig, a arith, p, g *BlockParams, ac *blockActs, df []float64) []float64 {
	dh := mlpBackward(c, a, p, g, ac, df)
	da := make([]float64, len(df))
	for j := range da {
		da[j] = df[j] + dh[j]
	}
	dx := attentionBackward(c, a, p, g, ac, da)
	for j := range dx {
		dx[j] += dh[j]
	}
	return dx
}
