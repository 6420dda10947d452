package ref

import (
	"fmt"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref/internal/prod"
)

// LayerGrads are the gradients of a routed layer's loss.
type LayerGrads struct {
	// Params holds dL/dθ for every parameter θ of the layer, each in its
	// parameter's field and shape, so that Params.Tensors lists them in
	// the order of LayerParams.Tensors.
	Params *LayerParams
	X      []*mat.Dense // dL/dX, B matrices S×d
	// PredictorInput is dL/d of the predictor's input (B matrices S×d;
	// nil without a predictor): the gradient that the stop-gradient of
	// docs/spec.md §8 keeps from X, which X does not receive.
	PredictorInput []*mat.Dense
	// RouterInput is dL/d of LayerPartGrads.RouterInput, the router's
	// share of the gradient, when the router read it in place of X (B
	// matrices S×d); nil otherwise.
	RouterInput []*mat.Dense
}

// LayerPartGrads are the gradients of a loss with respect to the parts of
// a routed layer's output out_i = base_i + mult_i·f_i (LayerForwardFrozen):
// base is X, or X + Attn(N1(X)) under MLP-only routing; f is
// LayerResult.Update and mult LayerResult.Multipliers (for dense compute
// the straight-through w, whose derivative in g is 1). For the loss
// Σ U·out, they are Base = U, Update = mult·U and Mult_i = U_i·f_i.
type LayerPartGrads struct {
	Base []*mat.Dense // B matrices S×d
	// Update is read at the positions where f was computed; nil when no
	// gradient reaches the layer's own block (the caller runs the block
	// itself, BlockPass).
	Update []*mat.Dense
	// Mult is read at the positions where f was computed; elsewhere the
	// multiplier is the constant 0.
	Mult [][]float64 // B×S
	// Weights, if not nil, is dL/dg by ways other than the multipliers
	// (a skipped token scaled by its weight), read at every valid position
	// and added to Mult's share before the weighting's backward.
	Weights [][]float64 // B×S
	// Router, if not nil, is dL/dr by ways other than the weighting and
	// the auxiliary losses (a gate computed from r in place of g), read at
	// every valid position.
	Router [][]float64 // B×S
	// RouterInput, if not nil, is what the router read in place of X (B
	// matrices S×d: a router fed another function of X, as a port whose
	// router reads N1(X), docs/spec.md §11's router_normed_input, with
	// res.RouterWeights computed from it): the router's parameters take
	// their gradient at it, and its dL/d of it is returned in
	// LayerGrads.RouterInput instead of being added into X.
	RouterInput []*mat.Dense
}

// LayerForwardKept is LayerForwardFrozen keeping the values LayerBackward
// reads: the same result.
func LayerForwardKept(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen) (*LayerResult, error) {
	return layerFrozen(cfg, p, in, fz, true)
}

// LayerBackward returns the gradients, with respect to every parameter and
// to X, of a loss reaching the layer through its output's parts (parts)
// and its AuxLoss, the routing frozen as in res, which LayerForwardKept
// (or LayerForwardGradients) returned for the same cfg, p and in.
// LayerGradients is LayerBackward of the parts of Σ upstream·out.
func LayerBackward(cfg spec.Config, p *LayerParams, in LayerInputs, res *LayerResult, parts LayerPartGrads) (*LayerGrads, error) {
	if res.acts == nil {
		return nil, fmt.Errorf("layer: the result has no values for a backward pass; make it with LayerForwardKept")
	}
	if err := checkUpstream(cfg, in, parts.Base); err != nil {
		return nil, err
	}
	if parts.Update != nil {
		if err := checkUpstream(cfg, in, parts.Update); err != nil {
			return nil, err
		}
	}
	s, _ := in.X[0].Dims()
	if err := checkShape2("multipliers' gradient", parts.Mult, len(in.X), s); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	if parts.Weights != nil {
		if err := checkShape2("weights' gradient", parts.Weights, len(in.X), s); err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
	}
	if parts.Router != nil {
		if err := checkShape2("router weights' gradient", parts.Router, len(in.X), s); err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
	}
	if parts.RouterInput != nil {
		if err := checkUpstream(cfg, in, parts.RouterInput); err != nil {
			return nil, fmt.Errorf("router input: %w", err)
		}
	}
	return layerBackward(cfg, signed, p, in, res, parts), nil
}

// upstreamParts are the LayerPartGrads of Σ upstream·out (under the
// squares arithmetic, of a squared upstream), from res kept for the
// backward pass. Update and Mult are read only where the update was
// computed (res.acts), so only there are they computed: elsewhere they
// are 0.
func upstreamParts(a arith, res *LayerResult, upstream []*mat.Dense) LayerPartGrads {
	pg := LayerPartGrads{Base: upstream}
	for b, u := range upstream {
		s, d := u.Dims()
		df := mat.NewDense(s, d, nil)
		dm := make([]float64, s)
		for _, i := range res.acts[b].computed {
			ui, fi, dfi := u.RawRowView(i), res.Update[b].RawRowView(i), df.RawRowView(i)
			for j := range ui {
				dfi[j] = float64(a.f(res.Multipliers[b][i]) * ui[j])
			}
			dm[i] = dotRow(ui, a.rows(fi))
		}
		pg.Update = append(pg.Update, df)
		pg.Mult = append(pg.Mult, dm)
	}
	return pg
}

// LayerGradients is the analytic backward pass of LayerForwardFrozen: it
// returns the layer's result and the gradients of
//
//	L = Σ_b Σ_i upstream_b[i]·out_b[i] + AuxLoss
//
// with respect to every parameter and to X, with the routing decision and
// the stop-gradient constants of fz held fixed (the derivative that the
// central differences of LayerForwardFrozen approximate;
// TestLayerGradientsAreTheFiniteDifferences holds them together).
// upstream is B matrices S×d.
func LayerGradients(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen, upstream []*mat.Dense) (*LayerResult, *LayerGrads, error) {
	res, err := layerFrozen(cfg, p, in, fz, true)
	if err != nil {
		return nil, nil, err
	}
	if err := checkUpstream(cfg, in, upstream); err != nil {
		return nil, nil, err
	}
	return res, layerBackward(cfg, signed, p, in, res, upstreamParts(signed, res, upstream)), nil
}

// LayerForwardGradients is LayerForward and then LayerGradients at the
// decision it made (res.Frozen), with one forward pass instead of two: the
// same result and the same gradients.
func LayerForwardGradients(cfg spec.Config, p *LayerParams, in LayerInputs, upstream []*mat.Dense) (*LayerResult, *LayerGrads, error) {
	res, err := layerForward(cfg, p, in, true)
	if err != nil {
		return nil, nil, err
	}
	if err := checkUpstream(cfg, in, upstream); err != nil {
		return nil, nil, err
	}
	return res, layerBackward(cfg, signed, p, in, res, upstreamParts(signed, res, upstream)), nil
}

// checkUpstream checks that the upstream gradient has the shape of the
// layer's output, B matrices S×d.
func checkUpstream(cfg spec.Config, in LayerInputs, upstream []*mat.Dense) error {
	rows, s, err := batchShape("layer upstream gradient", upstream, cfg.Block.D)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	if xs, _ := in.X[0].Dims(); rows != len(in.X) || s != xs {
		return fmt.Errorf("layer: upstream gradient is %d×%d×d, want B×S×d = %d×%d×d", rows, s, len(in.X), xs)
	}
	return nil
}

// layerBackward is LayerBackward's pass over the kept forward res.
func layerBackward(cfg spec.Config, a arith, p *LayerParams, in LayerInputs, res *LayerResult, parts LayerPartGrads) *LayerGrads {
	s := res.Frozen.Selection.S
	g := &LayerGrads{Params: &LayerParams{
		Block: zeroBlockLike(&p.Block), Router: zeroVec(p.Router), RouterBias: zeroVec(p.RouterBias),
		PredW1: zeroMat(p.PredW1), PredB1: zeroVec(p.PredB1), PredW2: zeroMat(p.PredW2), PredB2: zeroVec(p.PredB2),
	}}
	dr := make([][]float64, len(in.X)) // dL/dr, B×S
	_, d := in.X[0].Dims()
	g.X = NewBatch(len(in.X), s, d)
	w := a.weights(&p.Block)
	for b := range in.X {
		dr[b] = make([]float64, s)
		v := validLen(in.Valid, b, s)
		var df *mat.Dense
		if parts.Update != nil {
			df = parts.Update[b]
		}
		routedRowBackward(cfg, a, w, &g.Params.Block, res.acts[b], g.X[b], parts.Base[b], df, v)
		// mult = g on the selected tokens (gather) or w = g + sg(m·g − g) on
		// every valid one (dense): dg = dmult where the update was
		// computed, and mult is the constant 0 elsewhere.
		dg := make([]float64, s)
		for _, i := range res.acts[b].computed {
			dg[i] = parts.Mult[b][i]
		}
		if parts.Weights != nil {
			for i := 0; i < v; i++ {
				dg[i] += parts.Weights[b][i]
			}
		}
		if parts.Router != nil {
			for i := 0; i < v; i++ {
				dr[b][i] += parts.Router[b][i]
			}
		}
		weightingBackward(cfg.Weighting, a, res.RouterWeights[b], res.Weights[b], res.Selection.Rows[b], v, dg, dr[b])
	}
	auxRouterBackward(cfg, a, res, res.auxValid, dr)
	rx, rdx := in.X, g.X
	if parts.RouterInput != nil {
		rx, rdx = parts.RouterInput, make([]*mat.Dense, len(in.X))
		for b, x := range rx {
			n, d := x.Dims()
			rdx[b] = mat.NewDense(n, d, nil)
		}
		g.RouterInput = rdx
	}
	routerBackward(cfg, a, p, g.Params, rx, rdx, dr)
	if cfg.Aux == spec.AuxPredictor {
		g.PredictorInput = predictorBackward(cfg, a, p, g.Params, res, res.auxValid)
	}
	return g
}

// routedRowBackward writes into dx dL/dx (S×d) of routedRow's out given
// the gradients of its parts, dbase (S×d) and df (S×d, read at the
// computed positions; nil for none), adding the block's parameter
// gradients into gb; p is the block's parameters as a multiplies by them
// (arith.weights).
//
//	out_i = base_i + mult_i f_i (i computed), base_i otherwise
//	base = x, or for MLP-only x + Attn(N1(x)) over the v valid tokens
func routedRowBackward(cfg spec.Config, a arith, p, gb *BlockParams, acts *rowActs, dx, dbase, df *mat.Dense, v int) {
	_, d := dbase.Dims()
	dx.Copy(dbase)
	if n := len(acts.computed); n > 0 && df != nil {
		dfc := make([]float64, n*d) // n×d
		for t, i := range acts.computed {
			copy(dfc[t*d:(t+1)*d], df.RawRowView(i))
		}
		var dxc []float64 // n×d
		if cfg.MLPOnly {
			dxc = mlpBackward(cfg.Block, a, p, gb, acts.blk, dfc)
		} else {
			dxc = blockBackward(cfg.Block, a, p, gb, acts.blk, dfc)
		}
		for t, i := range acts.computed {
			row := dx.RawRowView(i)
			for j := range row {
				row[j] += dxc[t*d+j]
			}
		}
	}
	if cfg.MLPOnly && v > 0 {
		da := rawRows(dx.Slice(0, v, 0, d).(*mat.Dense)) // v×d
		dxa := attentionBackward(cfg.Block, a, p, gb, acts.attn, da)
		for i := 0; i < v; i++ {
			row := dx.RawRowView(i)
			for j := range row {
				row[j] += dxa[i*d+j]
			}
		}
	}
}

// dotRow is Σ_j a_j b_j in order of j, products rounded.
func dotRow(a, b []float64) float64 {
	s := 0.0
	for j := range a {
		s += float64(a[j] * b[j])
	}
	return s
}

// weightingBackward adds dL/dr of one batch row into dr given dL/dg (dg)
// for the weighting w of docs/spec.md §6, with r the router weights, g the
// weights, sel the row's selected positions and v its valid length:
//
//	raw:     g = r              dr += dg
//	sigmoid: g = σ(r)           dr += dg g (1 − g)
//	none:    g = 1              nothing
//	softmax: g = softmax(r_sel) dr_i += g_i (dg_i − Σ_j g_j dg_j), i, j selected
func weightingBackward(w spec.Weighting, a arith, r, g []float64, sel []int, v int, dg, dr []float64) {
	switch w {
	case spec.WeightRaw:
		for i := 0; i < v; i++ {
			dr[i] += dg[i]
		}
	case spec.WeightSigmoid:
		for i := 0; i < v; i++ {
			dr[i] += float64(float64(dg[i]*a.f(g[i])) * a.f(1-g[i]))
		}
	case spec.WeightSoftmax:
		dot := 0.0
		for _, i := range sel {
			dot += float64(a.f(g[i]) * dg[i])
		}
		for _, i := range sel {
			dr[i] += float64(a.f(g[i]) * a.sub(dg[i], dot))
		}
	}
}

// auxRouterBackward adds into dr the gradients of the auxiliary losses on
// r: AuxWeight·mean BCE(r, t) under router_bce (d/dr = (σ(r) − t)/N over
// the N valid tokens), and LoadBalanceWeight·S Σ_s F_s P_s with
// P_s = Σ_b σ(r_bs)/B over valid tokens (d/dr_bs = S F_s σ'(r_bs)/B, F
// frozen with the decision).
func auxRouterBackward(cfg spec.Config, a arith, res *LayerResult, valid []int, dr [][]float64) {
	r := res.RouterWeights
	rows, s := len(r), len(r[0])
	if cfg.Aux == spec.AuxRouterBCE {
		bceBackward(a, r, res.Targets, valid, cfg.AuxWeight, dr)
	}
	if cfg.LoadBalanceWeight != 0 {
		m := res.Selection.Mask()
		for i := 0; i < s; i++ {
			f := 0.0
			for b := 0; b < rows; b++ {
				if i < validLen(valid, b, s) {
					f += m[b][i]
				}
			}
			c := cfg.LoadBalanceWeight * float64(s) * (f / float64(rows)) / float64(rows)
			for b := 0; b < rows; b++ {
				if i < validLen(valid, b, s) {
					sg := Sigmoid(r[b][i])
					dr[b][i] += float64(a.f(c) * a.f(sg) * a.f(1-sg))
				}
			}
		}
	}
}

// bceBackward adds into dz the gradient of weight · MeanBCE(z, t, valid):
// weight (σ(z) − t)/N at each of the N valid tokens (under the squares
// arithmetic, the terms σ(z) and t each squared).
func bceBackward(a arith, z, t [][]float64, valid []int, weight float64, dz [][]float64) {
	n := 0
	for b := range z {
		n += validLen(valid, b, len(z[b]))
	}
	if n == 0 {
		return
	}
	for b := range z {
		for i := 0; i < validLen(valid, b, len(z[b])); i++ {
			dz[b][i] += a.f(weight) * a.sub(a.f(Sigmoid(z[b][i])), a.f(t[b][i])) / a.f(float64(n))
		}
	}
}

// routerBackward adds the gradients of r (docs/spec.md §2; jitter adds a
// constant) into the router's parameters (gp) and dx, r read from the rows
// of xs:
//
//	linear:      r = w·x      dw += Σ dr_i x_i,  dx_i += dr_i w
//	linear_bias: r = w·x + b  as linear, and db += Σ dr_i
//	l2norm:      r = ‖x‖₂     dx_i += dr_i x_i / ‖x_i‖ (0 where x_i = 0)
//	random:      nothing
func routerBackward(cfg spec.Config, a arith, p, gp *LayerParams, xs, dx []*mat.Dense, dr [][]float64) {
	for b, xb := range xs {
		s, _ := xb.Dims()
		for i := 0; i < s; i++ {
			if dr[b][i] == 0 {
				continue
			}
			xi, dxi := xb.RawRowView(i), dx[b].RawRowView(i)
			switch cfg.Router {
			case spec.RouterLinear, spec.RouterLinearBias:
				for j, v := range xi {
					gp.Router[j] += a.acc2(dr[b][i], v)
					dxi[j] += float64(dr[b][i] * a.f(p.Router[j]))
				}
				if cfg.Router == spec.RouterLinearBias {
					gp.RouterBias[0] += dr[b][i]
				}
			case spec.RouterL2Norm:
				norm := RouterL2NormWeight(xi)
				if norm == 0 {
					continue
				}
				for j, v := range xi {
					dxi[j] += float64(dr[b][i] * a.f(v) / a.f(norm))
				}
			}
		}
	}
}

// predictorBackward adds the gradients of AuxWeight·mean BCE(q, t) into the
// predictor's parameters (docs/spec.md §8): q = SiLU(a)·W2 + b2 with
// a = sg(x)·W1 + b1, so dq = AuxWeight (σ(q) − t)/N, dW2_u += dq SiLU(a_u),
// db2 += dq, da_u = dq W2_u SiLU'(a_u), db1 += da, dW1 += sg(x)ᵀ da; sg(x)
// takes no gradient, and the gradient it stops, dx = da·W1ᵀ, is returned
// (B matrices S×d).
func predictorBackward(cfg spec.Config, ar arith, p, g *LayerParams, res *LayerResult, valid []int) []*mat.Dense {
	q := res.PredictorLogits
	dq := make([][]float64, len(q))
	for b := range q {
		dq[b] = make([]float64, len(q[b]))
	}
	bceBackward(ar, q, res.Targets, valid, cfg.AuxWeight, dq)
	d, h := p.PredW1.Dims()
	var dx []*mat.Dense
	for b, xb := range res.Frozen.PredictorInput {
		s, _ := xb.Dims()
		x := rawRows(xb)
		pre := make([]float64, s*h) // s×h, a = x·W1 + b1
		for i := 0; i < s; i++ {
			copy(pre[i*h:(i+1)*h], p.PredB1)
		}
		prod.Mul(s, h, d, rowsOf(x, d), denseOf(p.PredW1), pre, h, true)
		da := make([]float64, s*h)
		for i := 0; i < s; i++ {
			if dq[b][i] == 0 {
				continue
			}
			g.PredB2[0] += dq[b][i]
			for u := 0; u < h; u++ {
				a := pre[i*h+u]
				g.PredW2.Set(u, 0, g.PredW2.At(u, 0)+ar.acc2(dq[b][i], SiLU(a)))
				da[i*h+u] = float64(float64(dq[b][i]*ar.f(p.PredW2.At(u, 0))) * ar.f(siluGrad(a)))
				g.PredB1[u] += da[i*h+u]
			}
		}
		ar.addXtY(g.PredW1, x, da, s)
		dx = append(dx, mat.NewDense(s, d, mulWt(da, s, ar.dense(p.PredW1), nil)))
	}
	return dx
}
