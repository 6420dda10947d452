package ref

import (
	"fmt"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// MoDEGrads are the gradients of a MoDE layer's loss.
type MoDEGrads struct {
	// Params holds dL/dθ for every parameter θ, each in its parameter's
	// field and shape, so that Params.Tensors lists them in the order of
	// MoDEParams.Tensors.
	Params *MoDEParams
	X      []*mat.Dense // dL/dX, B matrices S×d
}

// MoDEGradients is the analytic backward pass of MoDEForwardFrozen: it
// returns the layer's result and the gradients of
// L = Σ_b Σ_i upstream_b[i]·out_b[i] with respect to every parameter and
// to X, with the MoD selection and the expert choice of fz held fixed
// (TestMoDEGradientsAreTheFiniteDifferences holds them to the central
// differences). upstream is B matrices S×d.
func MoDEGradients(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, fz MoDEFrozen, upstream []*mat.Dense) (*MoDEResult, *MoDEGrads, error) {
	res, err := MoDEForwardFrozen(cfg, p, x, fz)
	if err != nil {
		return nil, nil, err
	}
	g, err := modeBackward(cfg, signed, p, x, res, upstream)
	return res, g, err
}

// modeBackward is MoDEGradients' backward pass in the arithmetic a (the
// upstream gradient squared under the squares arithmetic) over the
// forward res at the decisions res.Frozen.
func modeBackward(cfg spec.MoDEConfig, a arith, p *MoDEParams, x []*mat.Dense, res *MoDEResult, upstream []*mat.Dense) (*MoDEGrads, error) {
	fz := res.Frozen
	rows, s, err := batchShape("MoDE upstream gradient", upstream, cfg.Block.D)
	if err != nil {
		return nil, fmt.Errorf("mode: %w", err)
	}
	if rows != len(x) || s != fz.Selection.S {
		return nil, fmt.Errorf("mode: upstream gradient is %d×%d×d, want B×S×d = %d×%d×d", rows, s, len(x), fz.Selection.S)
	}
	u := a.mats(upstream)
	g := &MoDEGrads{Params: &MoDEParams{Block: zeroBlockLike(&p.Block), Router: zeroVec(p.Router), Gate: zeroMat(p.Gate)}}
	for e := range p.Experts {
		g.Params.Experts = append(g.Params.Experts, zeroBlockLike(&p.Experts[e]))
	}
	for b := range x {
		g.X = append(g.X, modeRowBackward(cfg, a, p, g.Params, res, x[b], u[b], b))
	}
	return g, nil
}

// modeRowBackward returns dL/dx (S×d) of one batch row b of the MoDE layer
// (modeApply) given its upstream gradient u (S×d), adding the parameters'
// gradients into g. For the computed tokens X~ (n×d):
//
//	a = Attn(N1(X~)), h = X~ + a, U = N2(h), G = softmax(U·W_g)
//	y_te = MLP_e(U_t), m_t = Σ_{e < E chose t} G_te y_te
//	staged:     out_i = x_i + r_i (a_t + m_t),  r_i = w·x_i
//	integrated: out_i = x_i + a_t + m_t
//
// so with dy_t = r_i u_i (staged) or u_i: dr_i = u_i·(a_t + m_t),
// dG_te = dy_t·y_te, dy_te = G_te dy_t through expert e's MLP, dz =
// G (dG − Σ G dG) through the gate's softmax, and h, a and X~ as in the
// block.
func modeRowBackward(cfg spec.MoDEConfig, a arith, p, g *MoDEParams, res *MoDEResult, x, u *mat.Dense, b int) *mat.Dense {
	d, width := cfg.Block.D, cfg.GateWidth()
	dx := mat.DenseCopyOf(u)
	pos := res.Selection.Rows[b]
	n := len(pos)
	if n == 0 {
		return dx
	}
	ac := attentionForward(cfg.Block, &p.Block, rawRows(GatherRows(x, pos)), pos)
	h := make([]float64, n*d) // n×d
	for j := range h {
		h[j] = ac.x[j] + ac.a[j]
	}
	ac.h = h
	ac.u2, ac.n2 = normRows(cfg.Block, p.Block.Norm2, p.Block.Norm2Bias, h, n, d)
	index := make(map[int]int, n)
	gates := make([][]float64, n) // n×width, the gates of the computed tokens
	for t, i := range pos {
		index[i] = t
		gates[t] = res.Gates[b][i]
	}
	experts, m := modeExperts(cfg, p, res.Experts[b], pos, ac.u2, gates)
	dy := make([]float64, n*d) // n×d, dL/d(a_t + m_t)
	for t, i := range pos {
		ui := u.RawRowView(i)
		if cfg.Form == spec.MoDEStaged {
			r := a.f(res.RouterWeights[b][i])
			dr := 0.0
			for j := 0; j < d; j++ {
				dy[t*d+j] = float64(r * ui[j])
				dr += float64(ui[j] * a.f(ac.a[t*d+j]+m[t*d+j]))
			}
			// r = w·x_i
			xi, dxi := x.RawRowView(i), dx.RawRowView(i)
			for j := 0; j < d; j++ {
				g.Router[j] += a.acc2(dr, xi[j])
				dxi[j] += float64(dr * a.f(p.Router[j]))
			}
		} else {
			copy(dy[t*d:(t+1)*d], ui)
		}
	}
	du := make([]float64, n*d) // n×d, dL/dU
	dgate := make([]float64, n*width)
	for e, c := range res.Experts[b] {
		ea := experts[e]
		if ea == nil {
			continue
		}
		dye := make([]float64, len(c)*d)
		for k, i := range c {
			t := index[i]
			ge := a.f(res.Gates[b][i][e])
			dgate[t*width+e] = dotRow(dy[t*d:(t+1)*d], a.rows(ea.m[k*d:(k+1)*d]))
			for j := 0; j < d; j++ {
				dye[k*d+j] = float64(ge * dy[t*d+j])
			}
		}
		due := mlpCoreBackward(cfg.Block, a, a.weights(&p.Experts[e]), &g.Experts[e], ea, dye)
		for k, i := range c {
			t := index[i]
			for j := 0; j < d; j++ {
				du[t*d+j] += due[k*d+j]
			}
		}
	}
	// G_t = softmax(z_t), z = U·W_g
	dz := make([]float64, n*width)
	for t, i := range pos {
		gt := a.rows(res.Gates[b][i])
		dot := dotRow(gt, dgate[t*width:(t+1)*width])
		for e := 0; e < width; e++ {
			dz[t*width+e] = float64(gt[e] * a.sub(dgate[t*width+e], dot))
		}
	}
	a.addXtY(g.Gate, ac.u2, dz, n)
	mulWt(dz, n, a.dense(p.Gate), du)
	dh := normBackward(cfg.Block, a, g.Block.Norm2, g.Block.Norm2Bias, p.Block.Norm2, h, ac.n2, du, n, d)
	da := make([]float64, n*d)
	for j := range da {
		da[j] = dy[j] + dh[j]
	}
	dxs := attentionBackward(cfg.Block, a, a.weights(&p.Block), &g.Block, ac, da)
	for t, i := range pos {
		row := dx.RawRowView(i)
		for j := range row {
			row[j] += dxs[t*d+j] + dh[t*d+j]
		}
	}
	return dx
}
