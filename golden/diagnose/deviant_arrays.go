package diagnose

import (
	"fmt"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// A deviant layer's arrays, packaged as a layer case's: the forward values
// of one evaluation (layerValueArrays) and the gradients, by the deviant
// layer's backward pass where it has one (diagnose_grad.go) or by finite
// differences (layerArraysFD).

// layerArrays computes a layer case's expected arrays under deviation d, as
// the generator does for the oracle: forward values at the case's inputs and
// parameters, and gradients of sum(upstream.out * out) + aux.total with
// the routing frozen, by d's backward pass (layerArraysAnalytic) where it
// has one, else by finite differences (layerArraysFD).
func layerArrays(c *format.Case, s oracle.LayerSpec, d *layerDeviation) (map[string]*format.Array, error) {
	if d.swapQK {
		return swapQKArrays(c, d, func(c *format.Case, d *layerDeviation) (map[string]*format.Array, error) { return layerArrays(c, s, d) })
	}
	if d.hasBackward() {
		return layerArraysAnalytic(c, s, d)
	}
	return layerArraysFD(c, s, d)
}

// layerValueArrays are a layer case's forward arrays of the evaluation l
// under a deviation whose decided routing is st.
func layerValueArrays(c *format.Case, s oracle.LayerSpec, l *layerRun, st *layerState) (map[string]*format.Array, error) {
	selected, err := selectedLike(c, "expected.selected", st.writtenSelection(l.res.Selection))
	if err != nil {
		return nil, err
	}
	res := l.res
	arrays := map[string]*format.Array{
		"expected.out":              oracle.BatchArray(l.out),
		"expected.router_logits":    oracle.FieldArray(res.RouterWeights, s.Valid),
		"expected.selected":         selected,
		"expected.weights":          oracle.FieldArray(res.Weights, s.Valid),
		"expected.multipliers":      oracle.FieldArray(l.mult, s.Valid),
		"expected.targets":          oracle.FieldArray(res.Targets, s.Valid),
		"expected.aux.router_bce":   format.Scalar(res.RouterBCE),
		"expected.aux.load_balance": format.Scalar(res.LoadBalance),
		"expected.aux.total":        format.Scalar(res.AuxLoss),
	}
	if s.Config.HasPredictor() {
		arrays["expected.predictor_logits"] = oracle.FieldArray(res.PredictorLogits, s.Valid)
		arrays["expected.predictor_accuracy"] = format.Scalar(res.PredictorAccuracy)
		arrays["expected.aux.predictor_bce"] = format.Scalar(res.PredictorBCE)
	}
	return arrays, nil
}

// layerArraysFD is layerArrays with the gradients by ref.FDGradient over
// run: the test oracle of the backward passes
// (TestAnalyticDeviantGradientsAreTheFiniteDifferences), and the way of a
// deviation that has none yet, at sizes within maxFDWork.
func layerArraysFD(c *format.Case, s oracle.LayerSpec, d *layerDeviation) (map[string]*format.Array, error) {
	dr, st, arrays, err := layerForwardOf(c, s, d)
	if err != nil {
		return nil, err
	}
	loss := func() (float64, error) {
		l, err := d.run(s.Config, dr.P, dr.In, st)
		if err != nil {
			return 0, err
		}
		return oracle.Dot(l.out, dr.U) + l.res.AuxLoss, nil
	}
	v, err := loss()
	if err != nil {
		return nil, err
	}
	arrays["expected.loss"] = format.Scalar(v)
	// A token outside the selection passes unchanged, and a padded one
	// counts in no loss, but for these two; and under softmax_whole_row a
	// skipped token's router weight is in every selected token's weight.
	gx, err := inputGradient(s, &dr, d, st, loss, !d.scaleSkipped && !d.auxOverPadding && !d.rowSoftmax)
	if err != nil {
		return nil, fmt.Errorf("gradient of input.x: %w", err)
	}
	arrays["grad.input.x"] = format.Float(gx, s.Batch, s.SeqLen, s.Config.Block.D)
	for _, t := range dr.P.Tensors("") {
		g, err := oracle.Gradient(loss, t.Data, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gradient of param.%s: %w", t.Name, err)
		}
		arrays["grad.param."+t.Name] = g
	}
	return arrays, nil
}

// layerForwardOf evaluates layer case c under d on its draw (a copy,
// which finite differences may perturb), deciding the routing into a new
// state: the draw, the state and the forward arrays.
func layerForwardOf(c *format.Case, s oracle.LayerSpec, d *layerDeviation) (oracle.LayerDraw, *layerState, map[string]*format.Array, error) {
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		return dr, nil, nil, err
	}
	st := &layerState{written: d.writtenFor("expected.")}
	l, err := d.run(s.Config, dr.P, dr.In, st)
	if err != nil {
		return dr, nil, nil, err
	}
	arrays, err := layerValueArrays(c, s, l, st)
	return dr, st, arrays, err
}

// inputGradient is grad.input.x of a layer case under deviation d, whose
// routing st is decided, by finite differences of loss, token by token.
// When skipUnseen is set, a token the block does not see takes a shorter
// way, if the configuration allows it: under gather compute without
// MLP-only routing, a token outside the selection enters the loss only as
// its own output, out_i = x_i (no emulated deviation touches such a token,
// but for gather_first_k's positions 0..k−1, which take the long way),
// and through its router and predictor logits in the auxiliary loss (the
// router's read from N1(x) under router_normed_input); and
// when the load-balancing term, the only one that reads the selection, has
// weight 0, ref computes that auxiliary loss without running the block if
// handed an empty selection. Its gradient is then u_i, the upstream
// gradient, plus the finite difference of the auxiliary loss alone: the
// same derivative without recomputing, twice per coordinate, a block its
// perturbation cannot reach (most of layer-capacity-floor's cost, where 71
// of every 100 tokens are outside the selection).
func inputGradient(s oracle.LayerSpec, dr *oracle.LayerDraw, d *layerDeviation, st *layerState, loss func() (float64, error), skipUnseen bool) ([]float64, error) {
	cfg := s.Config
	short := skipUnseen && cfg.Compute == spec.ComputeGather && !cfg.MLPOnly && cfg.LoadBalanceWeight == 0
	aux := func() (float64, error) {
		fz := st.fz
		fz.Selection = ref.Selection{S: s.SeqLen, Rows: make([][]int, s.Batch)}
		if d.feed == feedLiveInput {
			fz.PredictorInput = dr.In.X
		}
		res, err := ref.LayerForwardFrozen(cfg, dr.P, dr.In, fz)
		if err != nil {
			return 0, err
		}
		if d.routerNormed {
			// The losses read the router weights of N1(x).
			if res.RouterWeights, err = normedRouterWeights(cfg, dr.P, dr.In); err != nil {
				return 0, err
			}
			ref.AuxLosses(cfg, res, fz.Selection.Mask(), dr.In.Valid)
		}
		return res.AuxLoss, nil
	}
	m := st.fz.Selection.Mask()
	if d.firstK {
		for b, row := range st.fz.Selection.Rows {
			for i := range row {
				m[b][i] = 1
			}
		}
	}
	gx := make([]float64, 0, s.Batch*s.SeqLen*cfg.Block.D)
	for b, x := range dr.In.X {
		for i := 0; i < s.SeqLen; i++ {
			if !short || m[b][i] != 0 {
				g, err := ref.FDGradient(loss, x.RawRowView(i), ref.FDStep)
				if err != nil {
					return nil, err
				}
				gx = append(gx, g...)
				continue
			}
			g, err := ref.FDGradient(aux, x.RawRowView(i), ref.FDStep)
			if err != nil {
				return nil, err
			}
			for j, u := range dr.U[b].RawRowView(i) {
				g[j] += u
			}
			gx = append(gx, g...)
		}
	}
	return gx, nil
}

// selectedLike is a selection as a B×k array padded with −1 to the width
// of the case's array name (a deviant selection may be narrower), or, when
// a row selects more tokens than that array has columns (a deviant layer
// under causal routing may route every token), as wide as its widest row:
// the judge compares lists of selected positions of different widths as
// sets (a routing mismatch), so such an emulation is judged, not refused.
func selectedLike(c *format.Case, name string, sel ref.Selection) (*format.Array, error) {
	want, err := c.Array(name)
	if err != nil {
		return nil, err
	}
	if len(want.Shape) != 2 {
		return nil, fmt.Errorf("array %q has shape %v, want B×k", name, want.Shape)
	}
	width := want.Shape[1]
	for _, row := range sel.Rows {
		width = max(width, len(row))
	}
	v := make([]int64, 0, len(sel.Rows)*width)
	for _, row := range sel.Rows {
		for j := 0; j < width; j++ {
			p := int64(-1)
			if j < len(row) {
				p = int64(row[j])
			}
			v = append(v, p)
		}
	}
	return format.Int(v, len(sel.Rows), width), nil
}
