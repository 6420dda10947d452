package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// A deviant layer's gradient by a backward pass. layerDeviation.pass
// evaluates the layer as run does, from ref's pieces kept for a backward
// pass: ref.LayerForwardKept at the deviant routing (its capacity, its
// targets, its predictor's input), ref.BlockPass for a block run on other
// tokens, orders, positions or masks, and the deviant output formula.
// Its backward is the chain rule through the same pieces: the gradients of
// the output's parts (base, block update, multipliers) under the deviant
// formula, ref.LayerBackward for the routing's side (weighting, router,
// auxiliary losses as the deviation recomputed them, predictor, MLP-only
// attention; a deviant gate's dL/dr and a skipped token's dL/dg handed to
// it), BlockPass.Backward for a regathered block. TestAnalyticDeviantGradientsAreTheFiniteDifferences
// holds it to run's finite differences on every corpus case.

// outputBackwards are the output formulas whose backward partGrads knows,
// by the name of the deviation that sets them.
var outputBackwards = map[string]bool{
	"residual_twice": true, "residual_scaled": true, "no_weighting": true, "ste_m_plus_1": true,
}

// backwardNames lists the deviations whose every effect pass differentiates
// (the fields of layerDeviation they set: capacity, targetsFirstRow, feed,
// the regathering flags, sharedRouter, an output in outputBackwards,
// tanhGate, scaleSkipped, auxOverPadding, routerNormed). A
// deviation added to layerDeviations without a backward here is
// differentiated by finite differences, at sizes within maxFDWork only.
var backwardNames = map[string]bool{
	"residual_twice": true, "residual_scaled": true, "unsorted_indices": true, "no_weighting": true,
	"ste_m_plus_1": true, "predictor_no_stopgrad": true, "predictor_block_output": true,
	"capacity_off_by_one": true, "window_gathered_indices": true, "rope_gathered_indices": true,
	"targets_first_row": true, "weight_mlp_only": true, "gather_first_k": true,
	"capacity_floor_zero": true, "no_causal_mask": true, "shared_router": true,
	"tanh_gate": true, "skipped_scaled": true, "aux_over_padding": true, "softmax_whole_row": true,
	// qk_swapped is computed as the oracle's layer on the case with Wq
	// and Wk exchanged (swapQKArrays): its backward is the oracle's.
	"qk_swapped": true,
	// weight_scaled's α is carried back onto ref's multipliers and weights
	// (scaleBack).
	"weight_scaled": true,
	// router_normed_input's router gradient is taken at N1(x) and carried
	// back through N1 (normedInputBackward).
	"router_normed_input": true,
}

// hasBackward reports whether every deviation d is made of (its name joins
// them with "+") has a backward pass here.
func (d *layerDeviation) hasBackward() bool {
	if d.name == "" {
		return true // the oracle
	}
	for _, n := range strings.Split(d.name, "+") {
		if !backwardNames[n] {
			return false
		}
	}
	return true
}

// outputForm is the name of the deviation among d's whose output formula d
// has, or "" for ref's.
func (d *layerDeviation) outputForm() string {
	if d.output == nil {
		return ""
	}
	for _, n := range strings.Split(d.name, "+") {
		if outputBackwards[n] {
			return n
		}
	}
	return "?"
}

// rowPass is a row's block run again on the tokens a deviation gathers:
// the t-th row of the pass is position order[t] of the batch row.
type rowPass struct {
	order []int
	bp    *ref.BlockPass
	a, m  *mat.Dense // the pass's attention and MLP updates, len(order)×d
}

// passes are a layer evaluation's regathered blocks and where their
// multipliers come from.
type passes struct {
	rows []rowPass // by batch row
	// multAt is, by batch row and position, the position of ref's
	// multiplier applied there (gather_first_k weights the t-th gathered
	// token by the t-th selected one's); −1 where none is; nil for the
	// identity.
	multAt [][]int
}

// pass evaluates a routed layer under d, as run does, deciding the routing
// on the first call, and returns its backward: given dL/dout, the
// gradients of Σ dL/dout·out + AuxLoss with respect to the layer's
// parameters and X, the routing frozen. It returns nothing when decide
// refused the candidate (st.refused).
func (d *layerDeviation) pass(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, st *layerState) (*layerRun, ref.LayerBack, error) {
	if !st.decided {
		st.keep = true
		if err := d.decide(cfg, p, in, st); err != nil || st.refused {
			return nil, nil, err
		}
	}
	fz := st.fz
	if d.feed == feedLiveInput {
		fz.PredictorInput = in.X
	}
	res, err := d.keptForward(cfg, p, in, fz, st)
	if err != nil {
		return nil, nil, err
	}
	l := &layerRun{cfg: cfg, p: p, in: in, st: st, res: res, out: res.Out, upd: res.Update, mult: res.Multipliers,
		weightMLPOnly: d.weightMLPOnly, ran: res.Frozen.Selection.Mask()}
	var routerInput []*mat.Dense // N1(x) under routerNormed
	if d.routerNormed {
		if err := normedRouter(l); err != nil {
			return nil, nil, err
		}
		// The routing's backward reads the router weights of N1(x).
		res, routerInput = l.res, normedInput(cfg, p, in)
	}
	if d.scaled {
		scaleWeight(l, d.alpha())
	}
	var ps *passes
	gate := d.gate()
	if gate != nil && d.weightMLPOnly {
		gateMultipliers(l, gate)
	}
	if d.gathered() {
		if ps, err = d.regatherPasses(l); err != nil {
			return nil, nil, err
		}
	}
	if gate != nil {
		setGate(l, gate)
	}
	// The output formula's inputs, before it replaces l's values.
	base, mult := l.base(), l.mult
	if d.output != nil {
		d.output(l)
	}
	pre := l.out // before skipped tokens are scaled
	if d.scaleSkipped {
		scaleSkipped(l)
	}
	if d.auxOverPadding {
		// ref.LayerBackward differentiates the losses as recomputed.
		auxOverPadding(l)
	}
	back := func(u []*mat.Dense) (*ref.LayerGrads, error) {
		var dw [][]float64 // dL/dg by the skipped tokens' scaling
		if d.scaleSkipped {
			u, dw = scaledSkippedBackward(l, pre, u)
		}
		parts, dfs := d.partGrads(l, base, mult, ps, u)
		if gate != nil {
			if d.tanhGate {
				parts.Router = tanhGateBackward(l, parts.Mult, dw)
			} else {
				parts.Router = rowSoftmaxBackward(l, parts.Mult)
			}
			for _, row := range parts.Mult {
				clear(row)
			}
		} else {
			parts.Weights = dw
		}
		if d.scaled {
			scaleBack(d.alpha(), parts.Mult)
			scaleBack(d.alpha(), parts.Weights)
		}
		parts.RouterInput = routerInput
		g, err := ref.LayerBackward(cfg, p, in, res, parts)
		if err != nil {
			return nil, err
		}
		if routerInput != nil {
			normedInputBackward(cfg, p, in, g)
		}
		if ps != nil {
			ps.backward(g, dfs, d.weightMLPOnly, u)
		}
		if d.feed == feedLiveInput {
			for b, dx := range g.PredictorInput {
				g.X[b].Add(g.X[b], dx)
			}
		}
		return g, nil
	}
	return l, back, nil
}

// regatherPasses is regather with ref.BlockPass in place of the KV cache:
// row b's gathered tokens (as regather lists them) run as one pass whose
// t-th row turns by RoPE at its position p_t (at t for ropeAtIndex) and is
// masked and windowed by p_t, or by t where the mask or the window follow
// the gathered order (scoreOrder, windowByIndex, firstK); no_causal_mask's
// pass is bidirectional, every token at its position.
func (d *layerDeviation) regatherPasses(l *layerRun) (*passes, error) {
	blk := l.cfg.Block
	sel := l.res.Frozen.Selection.Rows
	order := sel
	if d.scoreOrder || d.firstK {
		order = l.st.order
	}
	ps := &passes{rows: make([]rowPass, len(l.in.X))}
	if d.firstK {
		l.mult, l.ran = make([][]float64, len(l.in.X)), make([][]float64, len(l.in.X))
		ps.multAt = make([][]int, len(l.in.X))
	}
	l.out, l.upd = sameShape(l.in.X), make([]*mat.Dense, len(l.in.X))
	for b, x := range l.in.X {
		o := l.out[b]
		o.Copy(x)
		s, dm := x.Dims()
		u := mat.NewDense(s, dm, nil)
		l.out[b], l.upd[b] = o, u
		if d.firstK {
			l.mult[b], l.ran[b] = make([]float64, s), make([]float64, s)
			ps.multAt[b] = make([]int, s)
			for i := range ps.multAt[b] {
				ps.multAt[b][i] = -1
			}
		}
		n := len(order[b])
		if n == 0 {
			continue
		}
		at := ref.BlockAt{RoPE: make([]int, n), Window: make([]int, n), Bidirectional: d.noCausalMask}
		for t, i := range order[b] {
			at.RoPE[t], at.Window[t] = i, i
			if d.ropeAtIndex {
				at.RoPE[t] = t
			}
			if d.scoreOrder || d.windowByIndex || d.firstK || d.noCausalMask {
				at.Window[t] = t
			}
		}
		bp, a, m, err := d.blockPass(blk, &l.p.Block, x, b, order[b], at)
		if err != nil {
			return nil, err
		}
		rp := rowPass{order: order[b], bp: bp, a: a, m: m}
		ps.rows[b] = rp
		for t, i := range order[b] {
			g := l.res.Multipliers[b][i]
			if d.firstK {
				g = l.res.Multipliers[b][sel[b][t]]
				l.mult[b][i], l.ran[b][i] = g, 1
				ps.multAt[b][i] = sel[b][t]
			}
			d.write(x.RawRowView(i), rp.a.RawRowView(t), rp.m.RawRowView(t), g, o.RawRowView(i), u.RawRowView(i))
		}
	}
	return ps, nil
}

// partGrads returns the gradients of Σ U·out with respect to the parts of
// l's output, given the base and the multipliers before the output formula
// (base, mult) and the regathered passes ps (nil for none): the parts of
// ref's layer (ref.LayerPartGrads; Update nil when the block was
// regathered), and, with ps, dL/df of the gathered update f = a + m by
// batch row and position (dL/dm under weightMLPOnly, where dL/da = U).
//
//	ref's:           out = base + μ f                 dbase = U, df = μU, dμ = U·f
//	residual_twice:  out = base + μ f + c base        dbase += cU, dμ += U·base (c = μ; c = ran, constant, under weightMLPOnly)
//	residual_scaled: out = μ (base + f), ran tokens   dbase = μU, df = μU, dμ = U·(base + f)
//	no_weighting:    out = base + ran f               df = ran U, dμ = 0
//	ste_m_plus_1:    out = x + w f, w = g m + (g − sg(g))   df = wU, dμ = (m + 1) U·f
//	weightMLPOnly:   out = x + a + μ m                da = U, dm = μU, dμ = U·m
//
// μ is l's multiplier (ref's, or under firstK the t-th selected token's),
// and dμ is added to ref's multiplier it was taken from.
func (d *layerDeviation) partGrads(l *layerRun, base []*mat.Dense, mult [][]float64, ps *passes, u []*mat.Dense) (ref.LayerPartGrads, []*mat.Dense) {
	form := d.outputForm()
	var parts ref.LayerPartGrads
	var dfs []*mat.Dense
	steMask := l.res.Frozen.Selection.Mask()
	// Where the base's factor is 1 at every token, dbase is U itself
	// (1·v is v), which LayerBackward reads and does not write.
	unitBase := form == "" || form == "no_weighting" || form == "ste_m_plus_1"
	for b, ub := range u {
		s, dm := ub.Dims()
		dbase, df := ub, mat.NewDense(s, dm, nil)
		if !unitBase {
			dbase = mat.NewDense(s, dm, nil)
		}
		dmult := make([]float64, s)
		for i := 0; i < s; i++ {
			ui, xi, fi := ub.RawRowView(i), base[b].RawRowView(i), l.upd[b].RawRowView(i)
			mu, ran := mult[b][i], l.ran[b][i]
			dbi, dfi := dbase.RawRowView(i), df.RawRowView(i)
			// f's factor and the base's, and dμ.
			fac, baseFac, dmu := mu, 1.0, 0.0
			fpart := fi // the part of the update μ multiplies
			if d.weightMLPOnly && ps != nil && ran != 0 {
				fpart = ps.rows[b].m.RawRowView(slices.Index(ps.rows[b].order, i))
			}
			switch form {
			case "":
				dmu = dotRow(ui, fpart)
			case "residual_twice":
				c := mu
				if d.weightMLPOnly {
					c = ran
				} else {
					dmu += dotRow(ui, xi)
				}
				baseFac += c
				dmu += dotRow(ui, fpart)
			case "residual_scaled":
				if ran != 0 {
					baseFac = mu
					dmu = dotRow(ui, xi) + dotRow(ui, fi)
				} else {
					dmu = dotRow(ui, fi)
				}
			case "no_weighting":
				fac = ran
			case "ste_m_plus_1":
				g, g0 := l.res.Weights[b][i], l.st.g0[b][i]
				fac = float64(g*steMask[b][i]) + (g - g0)
				dmu = float64((steMask[b][i] + 1) * dotRow(ui, fi))
			}
			for j, v := range ui {
				if !unitBase {
					dbi[j] = float64(baseFac * v)
				}
				dfi[j] = float64(fac * v)
			}
			at := i
			if ps != nil && ps.multAt != nil {
				at = ps.multAt[b][i]
			}
			if at >= 0 {
				dmult[at] += dmu
			}
		}
		parts.Base = append(parts.Base, dbase)
		parts.Mult = append(parts.Mult, dmult)
		if ps != nil {
			dfs = append(dfs, df)
		} else {
			parts.Update = append(parts.Update, df)
		}
	}
	return parts, dfs
}

// scaledSkippedBackward is the backward of scaleSkipped: given dL/dout
// (u), it returns dL/d of the output before the scaling and dL/dg, g the
// weights as reported (l.res.Weights), from the output before (pre).
//
//	skipped valid i:  out_i = g_i pre_i    dpre_i = g_i U_i, dg_i = U_i·pre_i
//	every other i:    out_i = pre_i        dpre_i = U_i
func scaledSkippedBackward(l *layerRun, pre, u []*mat.Dense) ([]*mat.Dense, [][]float64) {
	m, g := l.res.Selection.Mask(), l.res.Weights
	dpre, dg := make([]*mat.Dense, len(u)), make([][]float64, len(u))
	for b, ub := range u {
		s, _ := ub.Dims()
		dpre[b], dg[b] = mat.DenseCopyOf(ub), make([]float64, s)
		for i := range oracle.ValidLen(l.in.Valid, b, s) {
			if m[b][i] != 0 {
				continue
			}
			row := dpre[b].RawRowView(i)
			dg[b][i] = dotRow(row, pre[b].RawRowView(i))
			for j, v := range row {
				row[j] = float64(g[b][i] * v)
			}
		}
	}
	return dpre, dg
}

// tanhGateBackward is dL/dr of tanhGate's g = 1 + α·tanh(r), given dL/d of
// its multipliers (dmult, read where the block ran, g there) and dL/dg by
// other ways (dw, nil for none; read at every valid token):
//
//	dr_i = α (1 − tanh²(r_i)) (ran_i dmult_i + dw_i)
func tanhGateBackward(l *layerRun, dmult, dw [][]float64) [][]float64 {
	r := l.res.RouterWeights
	dr := make([][]float64, len(r))
	for b, row := range r {
		dr[b] = make([]float64, len(row))
		for i := range oracle.ValidLen(l.in.Valid, b, len(row)) {
			dg := 0.0
			if l.ran[b][i] != 0 {
				dg = dmult[b][i]
			}
			if dw != nil {
				dg += dw[b][i]
			}
			t := math.Tanh(row[i])
			dr[b][i] = float64(float64(pmodAlpha*(1-float64(t*t))) * dg)
		}
	}
	return dr
}

// rowSoftmaxBackward is dL/dr of rowSoftmaxGate's g, given dL/d of its
// multipliers (dmult, read where the block ran, g there):
//
//	dr_i = g_i (dg_i − Σ_valid j g_j dg_j),  dg_i = ran_i dmult_i
func rowSoftmaxBackward(l *layerRun, dmult [][]float64) [][]float64 {
	g := l.res.Weights
	dr := make([][]float64, len(g))
	for b, row := range g {
		dr[b] = make([]float64, len(row))
		n := oracle.ValidLen(l.in.Valid, b, len(row))
		dg := make([]float64, n)
		dot := 0.0
		for i := range n {
			if l.ran[b][i] != 0 {
				dg[i] = dmult[b][i]
			}
			dot += float64(row[i] * dg[i])
		}
		for i := range n {
			dr[b][i] = float64(row[i] * (dg[i] - dot))
		}
	}
	return dr
}

// dotRow is Σ_j a_j b_j in order of j, products rounded.
func dotRow(a, b []float64) float64 {
	s := 0.0
	for j := range a {
		s += float64(a[j] * b[j])
	}
	return s
}

// backward adds the regathered blocks' gradients into g: each row's pass
// takes dL/da and dL/dm of its rows from dfs (dL/da = U under
// weightMLPOnly), and its dL/dX is added into the gathered positions of
// g.X.
func (ps *passes) backward(g *ref.LayerGrads, dfs []*mat.Dense, weightMLPOnly bool, u []*mat.Dense) {
	for b, rp := range ps.rows {
		if rp.bp == nil {
			continue
		}
		_, dm := dfs[b].Dims()
		dA, dM := mat.NewDense(len(rp.order), dm, nil), mat.NewDense(len(rp.order), dm, nil)
		for t, i := range rp.order {
			dM.SetRow(t, dfs[b].RawRowView(i))
			if weightMLPOnly {
				dA.SetRow(t, u[b].RawRowView(i))
			} else {
				dA.SetRow(t, dfs[b].RawRowView(i))
			}
		}
		dx := rp.bp.Backward(&g.Params.Block, dA, dM)
		for t, i := range rp.order {
			row := g.X[b].RawRowView(i)
			for j, v := range dx.RawRowView(t) {
				row[j] += v
			}
		}
	}
}

// layerArraysAnalytic is layerArrays with the gradients by pass's backward.
func layerArraysAnalytic(c *format.Case, s oracle.LayerSpec, d *layerDeviation) (map[string]*format.Array, error) {
	dr, err := d.layerDraw(c, s)
	if err != nil {
		return nil, err
	}
	st := layerState{written: d.writtenFor("expected.")}
	l, back, err := d.pass(s.Config, dr.P, dr.In, &st)
	if err != nil || st.refused {
		return map[string]*format.Array{}, err
	}
	arrays, err := layerValueArrays(c, s, l, &st)
	if err != nil {
		return nil, err
	}
	arrays["expected.loss"] = format.Scalar(oracle.Dot(l.out, dr.U) + l.res.AuxLoss)
	if d.caught != nil {
		if d.caught.byForward, err = d.caught.fails(c, arrays); err != nil || d.caught.byForward {
			return arrays, err
		}
	}
	g, err := back(dr.U)
	if err != nil {
		return nil, err
	}
	arrays["grad.input.x"] = oracle.BatchArray(g.X)
	for _, t := range g.Params.Tensors("") {
		arrays["grad.param."+t.Name] = format.Float(t.Data, t.Shape...)
	}
	return arrays, nil
}

// modelArraysAnalytic is modelArrays with the gradients by each routed
// layer's pass through ref.ModelForwardThrough; with d.caught, only where
// the forward arrays do not already fail the case's comparison
// (layerArraysAnalytic).
func modelArraysAnalytic(c *format.Case, s oracle.ModelSpec, d *layerDeviation) (map[string]*format.Array, error) {
	p, in, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	st := d.modelStates(len(s.Config.Layers))
	mr := &modelRun{layers: make([]*layerRun, len(s.Config.Layers))}
	first := -1 // the first routed layer, whose router every one uses under sharedRouter
	step := func(l int, li ref.LayerInputs) ([]*mat.Dense, float64, ref.LayerBack, error) {
		lp := p.Layers[l]
		if d.sharedRouter {
			if first < 0 {
				first = l
			} else {
				own := *lp
				own.Router, own.RouterBias = p.Layers[first].Router, p.Layers[first].RouterBias
				lp = &own
			}
		}
		lr, back, err := d.pass(s.Config.Layers[l].Config, lp, li, &st[l])
		if err != nil {
			return nil, 0, nil, err
		}
		mr.layers[l] = lr
		return lr.out, lr.res.AuxLoss, back, nil
	}
	res, back, err := ref.ModelForwardThrough(s.Config, p, in, step)
	if err != nil {
		return nil, err
	}
	mr.logits, mr.ce, mr.loss = res.Logits, res.CE, res.Loss
	arrays, err := modelValueArrays(c, s, mr, st)
	if err != nil {
		return nil, err
	}
	if d.caught != nil {
		if d.caught.byForward, err = failsOn(c, arrays); err != nil || d.caught.byForward {
			return arrays, err
		}
	}
	g, err := back()
	if err != nil {
		return nil, err
	}
	if d.sharedRouter {
		// The layers after the first used its router: their gradients
		// are its, and their own routers are unused.
		for l, ml := range s.Config.Layers {
			if !ml.Routed || l == first {
				continue
			}
			gl, gf := g.Layers[l], g.Layers[first]
			for j, v := range gl.Router {
				gf.Router[j] += v
				gl.Router[j] = 0
			}
			for j, v := range gl.RouterBias {
				gf.RouterBias[j] += v
				gl.RouterBias[j] = 0
			}
		}
	}
	for _, t := range g.Tensors() {
		arrays["grad.param."+t.Name] = format.Float(t.Data, t.Shape...)
	}
	return arrays, nil
}

// refuseFD marks as not emulated, with the reason, each deviation of devs
// to be emulated on c that has no backward pass here when its finite
// differences would take more than maxFDWork.
func refuseFD(c *format.Case, devs []layerDeviation, ems []emulation) {
	w := format.FDWork(c.Manifest)
	if w <= format.MaxFDWork {
		return
	}
	for i := range ems {
		if ems[i].reason == "" && !devs[i].hasBackward() {
			ems[i].reason = fmt.Sprintf("no backward pass yet: its finite-difference gradient on this case would take about %.3g multiply-adds, more than the %.3g accepted (maxFDWork)", w, float64(format.MaxFDWork))
		}
	}
}
