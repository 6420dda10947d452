package diagnose

import (
	"fmt"
	"math"
	"slices"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// The layer deviations of docs/spec.md §11, one unit each, in §11's order:
// its name, when it applies to a routed layer's configuration (skip, which
// says why not; none: every routed layer) and what it changes, side by side.
// A change is either a function of the evaluated layer (output, and the
// p-MoD and padding deviations' own steps, which run applies in order) or a
// switch the emulated layer's decision and gathering read (decide,
// regather in diagnose_layer.go). Their backward passes are in
// diagnose_grad.go, the combinations of several in diagnose_combine.go.

// layerDeviations lists the emulated layer deviations in the order of
// format.Deviations.
func layerDeviations() []layerDeviation {
	return []layerDeviation{
		devResidualTwice,
		devResidualScaled,
		devUnsortedIndices,
		devNoWeighting,
		devSTEMPlusOne,
		devPredictorNoStopgrad,
		devPredictorBlockOutput,
		devCapacityOffByOne,
		devWindowGatheredIndices,
		devRoPEGatheredIndices,
		devTargetsFirstRow,
		devWeightMLPOnly,
		devGatherFirstK,
		devCapacityFloorZero,
		devNoCausalMask,
		devSharedRouter,
		devTanhGate,
		devSkippedScaled,
		devAuxOverPadding,
		devSoftmaxWholeRow,
		devQKSwapped,
		devWeightScaled,
		devRouterNormed,
	}
}

// residual_twice: residual counted twice: out = x + g·(x + f), the block
// returned its own residual. It applies to every routed layer.
var devResidualTwice = layerDeviation{name: "residual_twice", output: residualTwice}

// residualTwice is out = x + g·(x + f): ref's out plus mult·x wherever the
// block ran (mult is g on selected tokens, the straight-through w in dense
// compute, 0 elsewhere). When the weight multiplies only the MLP's update
// (weight_mlp_only), the returned residual is added unweighted:
// out = x + (x + a + g·m), sramshetty/mixture-of-depths' form.
func residualTwice(l *layerRun) {
	l.out = l.eachRow(func(b, i int, x, out, _ []float64, mult float64) []float64 {
		if l.weightMLPOnly {
			mult = l.ran[b][i]
		}
		row := make([]float64, len(out))
		for j := range row {
			row[j] = out[j] + float64(mult*x[j])
		}
		return row
	})
}

// residual_scaled: residual scaled: out = g·(x + f) for selected tokens. It
// applies to every routed layer.
var devResidualScaled = layerDeviation{name: "residual_scaled", output: residualScaled}

// residualScaled is out = g·(x + f) for the selected tokens, x (or, in dense
// compute, ref's x + w·f) for the others.
func residualScaled(l *layerRun) {
	m := l.ran
	l.out = l.eachRow(func(b, i int, x, out, upd []float64, mult float64) []float64 {
		if m[b][i] == 0 {
			return out
		}
		row := make([]float64, len(out))
		for j := range row {
			row[j] = mult * (x[j] + upd[j])
		}
		return row
	})
}

// unsorted_indices: indices not sorted before the block: the causal mask
// follows router-score order, not positions. It sets scoreOrder: the layer's
// regather runs the block in router-score order. It applies where
// skipUnsorted finds no reason against it.
var devUnsortedIndices = layerDeviation{name: "unsorted_indices", skip: skipUnsorted, scoreOrder: true}

// skipUnsorted says why unsorted_indices does not apply to a routed layer of
// configuration cfg, or returns "".
func skipUnsorted(cfg spec.Config) string {
	switch {
	case cfg.Causal != spec.CausalOff:
		return "causal routing picks tokens by sign in position order; there is no top-k whose indices could come out unsorted"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute runs the block on every token in position order; the selection only masks the weight"
	case cfg.MLPOnly:
		return "MLP-only routing routes a per-token MLP and runs attention over every token in position order, so the order of the selected tokens changes nothing"
	}
	return ""
}

// no_weighting: no weighting: out = x + f, so the router gets no gradient
// from the LM loss. It applies to every routed layer.
var devNoWeighting = layerDeviation{name: "no_weighting", output: noWeighting}

// noWeighting is out = x + f for the selected tokens (x + m·f in dense
// compute): the implementation computes g but never applies it (docs/spec.md
// §11). The reported weights stay g, as the router computes it; the
// reported multipliers are m, the factor applied.
func noWeighting(l *layerRun) {
	m := l.ran
	l.mult = m
	l.out = l.eachRow(func(b, i int, x, _, upd []float64, _ float64) []float64 {
		row := make([]float64, len(x))
		for j := range row {
			row[j] = x[j] + float64(m[b][i]*upd[j])
		}
		return row
	})
}

// ste_m_plus_1: straight-through weight w = g·m + (g − sg(g)), whose
// derivative is m + 1 instead of 1. It applies where skipUnlessDense finds
// no reason against it.
var devSTEMPlusOne = layerDeviation{name: "ste_m_plus_1", skip: skipUnlessDense, output: steMPlusOne}

// skipUnlessDense says why ste_m_plus_1 does not apply to a routed layer of
// configuration cfg, or returns "".
func skipUnlessDense(cfg spec.Config) string {
	if cfg.Compute != spec.ComputeDense {
		return "the straight-through weight exists only with dense compute (docs/spec.md §7)"
	}
	return ""
}

// steMPlusOne is dense compute with the weight found in the wild,
// w = g·m + (g − sg(g)), with sg(g) the weight at the unperturbed point: its
// value is m·g, as docs/spec.md §7's, but dw/dg = m + 1 instead of 1.
// (Equivalently the loss gains Σ_i m_i c_i g_i with c_i = Σ_j U_ij f_ij
// held constant; the tests check that form.)
func steMPlusOne(l *layerRun) {
	m := l.res.Frozen.Selection.Mask()
	g, g0 := l.res.Weights, l.st.g0
	l.out = l.eachRow(func(b, i int, x, _, upd []float64, _ float64) []float64 {
		w := float64(g[b][i]*m[b][i]) + (g[b][i] - g0[b][i])
		row := make([]float64, len(x))
		for j := range row {
			row[j] = x[j] + float64(w*upd[j])
		}
		return row
	})
}

// predictor_no_stopgrad: predictor fed x without stop-gradient: its loss
// sends gradient into the trunk. It sets feed: run feeds the predictor x
// itself. It applies where skipUnlessPredictor finds no reason against it.
var devPredictorNoStopgrad = layerDeviation{name: "predictor_no_stopgrad", skip: skipUnlessPredictor, feed: feedLiveInput}

// skipUnlessPredictor says why predictor_no_stopgrad does not apply to a
// routed layer of configuration cfg, or returns "".
func skipUnlessPredictor(cfg spec.Config) string {
	if !cfg.HasPredictor() {
		return "the layer has no predictor"
	}
	return ""
}

// predictor_block_output: predictor fed the block output instead of the
// layer input. It sets feed: run feeds the predictor the layer's output. It
// applies where skipBlockOutput finds no reason against it.
var devPredictorBlockOutput = layerDeviation{name: "predictor_block_output", skip: skipBlockOutput, feed: feedOutput}

// skipBlockOutput says why predictor_block_output does not apply to a routed
// layer of configuration cfg, or returns "".
func skipBlockOutput(cfg spec.Config) string {
	if why := skipUnlessPredictor(cfg); why != "" {
		return why
	}
	if cfg.Causal == spec.CausalPredictor {
		return "the predictor decides the routing, so it runs before the block and cannot be fed its output"
	}
	return ""
}

// capacity_off_by_one: capacity off by one: a strict '>' against the k-th
// router weight, {i : r_i > r_(k)}, selects k − 1 tokens, fewer when weights
// tie with the k-th (each tied one is dropped). It sets capacity: decide
// selects the tokens above the k-th weight. It applies to every routed
// layer.
var devCapacityOffByOne = layerDeviation{name: "capacity_off_by_one", capacity: capacityOffByOne}

// window_gathered_indices: sliding attention window counted in indices of
// the gathered subset instead of original positions: a selected token
// attends to the last w selected tokens, however far back. It sets
// windowByIndex: regather counts the window in gathered indices. It applies
// where skipUnlessGatheredWindow finds no reason against it.
var devWindowGatheredIndices = layerDeviation{name: "window_gathered_indices", skip: skipUnlessGatheredWindow, windowByIndex: true}

// skipUnlessGatheredWindow says why window_gathered_indices does not apply
// to a routed layer of configuration cfg, or returns "".
func skipUnlessGatheredWindow(cfg spec.Config) string {
	if cfg.Block.Window == 0 {
		return "the block has no attention window"
	}
	return skipUngathered(cfg)
}

// skipUngathered says why a routed layer of configuration cfg runs
// attention over every valid token, whose indices are their positions (so
// that a deviation counting in gathered indices changes nothing), or
// returns "".
func skipUngathered(cfg spec.Config) string {
	switch {
	case cfg.Compute == spec.ComputeDense:
		return "dense compute runs the block on every valid token, whose indices are their positions"
	case cfg.MLPOnly:
		return "MLP-only routing runs attention over every valid token, whose indices are their positions"
	}
	return ""
}

// rope_gathered_indices: RoPE applied at the gathered indices 0..k−1 instead
// of the tokens' original positions (the block called on the gathered tensor
// with the first k rotary angles). It sets ropeAtIndex: regather rotates at
// the gathered indices. It applies where skipUnlessGatheredRoPE finds no
// reason against it.
var devRoPEGatheredIndices = layerDeviation{name: "rope_gathered_indices", skip: skipUnlessGatheredRoPE, ropeAtIndex: true}

// skipUnlessGatheredRoPE says why rope_gathered_indices does not apply to a
// routed layer of configuration cfg, or returns "".
func skipUnlessGatheredRoPE(cfg spec.Config) string {
	if cfg.Block.Positions != spec.PositionRoPE {
		return "the block has no rotary embeddings"
	}
	return skipUngathered(cfg)
}

// targets_first_row: auxiliary targets scattered into a flat B·S vector by
// position: every row's selected positions mark row 0, the other rows'
// targets stay 0. It sets targetsFirstRow: decide marks row 0 with every
// row's targets. A case with one row cannot tell it apart. It applies to
// every routed layer.
var devTargetsFirstRow = layerDeviation{name: "targets_first_row", targetsFirstRow: true}

// weight_mlp_only: router weight on the MLP's update only: out = x + a + g·m
// for a selected token, a the attention's update and m the MLP's, instead of
// x + g·(a + m). It sets weightMLPOnly: regather weights the MLP's update
// only. It applies where skipWeightMLPOnly finds no reason against it.
var devWeightMLPOnly = layerDeviation{name: "weight_mlp_only", skip: skipWeightMLPOnly, weightMLPOnly: true}

// skipWeightMLPOnly says why weight_mlp_only does not apply to a routed
// layer of configuration cfg, or returns "".
func skipWeightMLPOnly(cfg spec.Config) string {
	switch {
	case cfg.MLPOnly:
		return "MLP-only routing weights only the MLP's update already; attention runs densely outside the routed part"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute's straight-through weight multiplies every token's whole update; the ports that weight only the MLP's update gather"
	}
	return ""
}

// gather_first_k: argsort(top-k indices) gathered in place of the sorted
// indices: the block runs on positions 0..k−1 (in the order argsort puts
// them, the causal mask following it), the t-th weighted by the t-th
// selected token's weight and written back at its own position. It sets
// firstK: regather gathers positions 0..k−1 in argsort order. It applies
// where skipFirstK finds no reason against it.
var devGatherFirstK = layerDeviation{name: "gather_first_k", skip: skipFirstK, firstK: true}

// skipFirstK says why gather_first_k does not apply to a routed layer of
// configuration cfg, or returns "".
func skipFirstK(cfg spec.Config) string {
	switch {
	case cfg.Causal != spec.CausalOff:
		return "causal routing picks tokens by sign in position order; there are no top-k indices to argsort"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute gathers nothing: the block runs on every token and the selection only masks the weight"
	case cfg.MLPOnly:
		return "MLP-only routing gathers the tokens for a per-token MLP only; the emulation gathers the whole block"
	}
	return ""
}

// capacity_floor_zero: capacity k = int(c·V): a plain floor, neither float-
// robust nor clamped to 1, so a short row gets k = 0 (and 0.29·100 gives
// 28). It sets capacity: decide takes k = intc·V. It applies where
// skipUnlessFloor finds no reason against it.
var devCapacityFloorZero = layerDeviation{name: "capacity_floor_zero", skip: skipUnlessFloor, capacity: capacityPlainFloor}

// skipUnlessFloor says why capacity_floor_zero does not apply to a routed
// layer of configuration cfg, or returns "".
func skipUnlessFloor(cfg spec.Config) string {
	if cfg.Capacity.Kind == spec.CapacityInteger {
		return "an integer capacity has no floor"
	}
	return ""
}

// no_causal_mask: no causal mask in the gathered block: each selected token
// attends to every selected token of its row, later ones included. It sets
// noCausalMask: regather runs the block unmasked. It applies where
// skipNoCausalMask finds no reason against it.
var devNoCausalMask = layerDeviation{name: "no_causal_mask", skip: skipNoCausalMask, noCausalMask: true}

// skipNoCausalMask says why no_causal_mask does not apply to a routed layer
// of configuration cfg, or returns "".
func skipNoCausalMask(cfg spec.Config) string {
	switch {
	case cfg.Block.Window > 0:
		return "a block with an attention window masks by it; the unmasked block of the ports has none"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute runs the block through ref's causal attention over every valid token"
	case cfg.MLPOnly:
		return "MLP-only routing runs attention densely, outside the gathered block"
	}
	return ""
}

// shared_router: one router shared by every routed layer of a model: each
// routed layer's router weights are computed with the same parameters (the
// first routed layer's), whose gradient sums over the layers. It sets
// sharedRouter: a model's runModel gives every routed layer the first one's
// router. It applies where skipSharedRouter finds no reason against it.
var devSharedRouter = layerDeviation{name: "shared_router", skip: skipSharedRouter, sharedRouter: true}

// skipSharedRouter says why shared_router does not apply to a routed layer
// of configuration cfg, or returns "".
func skipSharedRouter(cfg spec.Config) string {
	if cfg.Router != spec.RouterLinear && cfg.Router != spec.RouterLinearBias {
		return fmt.Sprintf("router %q has no parameters to share", cfg.Router)
	}
	return ""
}

// tanh_gate: p-MoD's TanhNorm in place of the configured weighting: g = 1 +
// α·tanh(r) with α = 0.2 at every valid token, so out = x + (1 +
// α·tanh(r))·f for a selected token. It applies where skipTanhGate finds no
// reason against it.
var devTanhGate = layerDeviation{name: "tanh_gate", skip: skipTanhGate, tanhGate: true}

// skipTanhGate says why tanh_gate does not apply to a routed layer of
// configuration cfg, or returns "".
func skipTanhGate(cfg spec.Config) string {
	if cfg.Compute == spec.ComputeDense {
		return "p-MoD gathers the selected tokens; its gate under dense compute's straight-through weight is not a port anyone wrote"
	}
	return ""
}

// tanhGate is p-MoD's TanhNorm in place of the configured weighting, g =
// 1 + α·tanh(r) (setGate).
func tanhGate(l *layerRun) { setGate(l, pmodGate) }

// setGate puts gate's weights in place of the configured weighting: every
// valid token's weight (reported as the weights), and a token the block ran
// on outputs x + g·f (its multiplier g); under weightMLPOnly, x + a + g·m,
// which the regathered block computed already with the multipliers
// gateMultipliers set.
func setGate(l *layerRun, gate func(*layerRun) (g, mult [][]float64)) {
	g, mult := gate(l)
	l.res.Weights, l.mult = g, mult
	if l.weightMLPOnly {
		return
	}
	l.out = l.eachRow(func(b, i int, x, out, upd []float64, g float64) []float64 {
		if l.ran[b][i] == 0 {
			return out
		}
		row := make([]float64, len(x))
		for j := range row {
			row[j] = x[j] + float64(g*upd[j])
		}
		return row
	})
}

// pmodGate is p-MoD's weight g = 1 + α·tanh(r) at every valid token of l,
// and the multipliers it makes: g where the block ran, 0 elsewhere.
func pmodGate(l *layerRun) (g, mult [][]float64) {
	r := l.res.RouterWeights
	g, mult = make([][]float64, len(r)), make([][]float64, len(r))
	for b, row := range r {
		g[b], mult[b] = make([]float64, len(row)), make([]float64, len(row))
		for i := range oracle.ValidLen(l.in.Valid, b, len(row)) {
			g[b][i] = 1 + float64(pmodAlpha*math.Tanh(row[i]))
			if l.ran[b][i] != 0 {
				mult[b][i] = g[b][i]
			}
		}
	}
	return g, mult
}

// gateMultipliers gives a layer with a gate in place of its weighting and
// the weight on the MLP's update only (tanh_gate+weight_mlp_only, p-MoD's
// own block; softmax_whole_row+weight_mlp_only, nanoMoD's) the gate's
// multipliers before its block is gathered again, so that each gathered
// token outputs x + a + g·m with the gate's g.
func gateMultipliers(l *layerRun, gate func(*layerRun) (g, mult [][]float64)) {
	_, l.res.Multipliers = gate(l)
}

// gate is the function of the gate d puts in place of the configured
// weighting (tanh_gate, softmax_whole_row), or nil.
func (d *layerDeviation) gate() func(*layerRun) (g, mult [][]float64) {
	switch {
	case d.tanhGate:
		return pmodGate
	case d.rowSoftmax:
		return rowSoftmaxGate
	}
	return nil
}

// softmax_whole_row: softmax weighting over every valid token of the row
// instead of the selected ones, g_i = exp(r_i) / Σ_valid exp(r_j), applied
// to the selected tokens. It applies where skipSoftmaxWholeRow finds no
// reason against it.
var devSoftmaxWholeRow = layerDeviation{name: "softmax_whole_row", skip: skipSoftmaxWholeRow, rowSoftmax: true}

// skipSoftmaxWholeRow says why softmax_whole_row does not apply to a
// routed layer of configuration cfg, or returns "".
func skipSoftmaxWholeRow(cfg spec.Config) string {
	switch {
	case cfg.Weighting != spec.WeightSoftmax:
		return fmt.Sprintf("weighting %q: the deviation is softmax weighting taken over the wrong tokens, and this layer does not weight by a softmax", cfg.Weighting)
	case cfg.Compute == spec.ComputeDense:
		return "the ports that take the softmax over the row gather the selected tokens"
	}
	return ""
}

// rowSoftmaxGate is softmax_whole_row's weight at every valid token, g_i =
// exp(r_i − r_max) / Σ_valid exp(r_j − r_max), and its multipliers: g where
// the block ran, 0 elsewhere.
func rowSoftmaxGate(l *layerRun) (g, mult [][]float64) {
	r := l.res.RouterWeights
	g, mult = make([][]float64, len(r)), make([][]float64, len(r))
	for b, row := range r {
		g[b], mult[b] = make([]float64, len(row)), make([]float64, len(row))
		v := row[:oracle.ValidLen(l.in.Valid, b, len(row))]
		if len(v) == 0 {
			continue
		}
		top, sum := slices.Max(v), 0.0
		for i, x := range v {
			g[b][i] = math.Exp(x - top)
			sum += g[b][i]
		}
		for i := range v {
			g[b][i] /= sum
			if l.ran[b][i] != 0 {
				mult[b][i] = g[b][i]
			}
		}
	}
	return g, mult
}

// pmodAlpha is the α of p-MoD's TanhNorm, g = 1 + α·tanh(r): the scale of
// its released training configurations (mod_weight_norm "tanh_0.2_1",
// 0.2·tanh(r) + 1; Zhang et al., arXiv 2412.04449).
const pmodAlpha = 0.2

// skipped_scaled: p-MoD's STRing: a valid token outside the selection is
// scaled by its weight, out = g·x, instead of passing unchanged, so the
// router learns from the skipped tokens too. It applies where
// skipSkippedScaled finds no reason against it.
var devSkippedScaled = layerDeviation{name: "skipped_scaled", skip: skipSkippedScaled, scaleSkipped: true}

// skipSkippedScaled says why skipped_scaled does not apply to a routed layer
// of configuration cfg, or returns "".
func skipSkippedScaled(cfg spec.Config) string {
	switch {
	case cfg.Compute == spec.ComputeDense:
		return "p-MoD gathers the selected tokens; under dense compute every token runs the block"
	case cfg.Weighting == spec.WeightSoftmax:
		return "softmax weighting defines g on the selected tokens only: a skipped token has no weight to be scaled by"
	case cfg.Weighting == spec.WeightNone:
		return "with g = 1 scaling a skipped token by its weight changes nothing"
	}
	return ""
}

// scaleSkipped is p-MoD's STRing: every valid token outside the selection
// outputs g·x (g·x' under MLP-only routing) instead of passing unchanged,
// g its weight as reported.
func scaleSkipped(l *layerRun) {
	m, g := l.res.Selection.Mask(), l.res.Weights
	l.out = l.eachRow(func(b, i int, _, out, _ []float64, _ float64) []float64 {
		if m[b][i] != 0 || i >= oracle.ValidLen(l.in.Valid, b, len(m[b])) {
			return out
		}
		row := make([]float64, len(out))
		for j := range row {
			row[j] = float64(g[b][i] * out[j])
		}
		return row
	})
}

// aux_over_padding: auxiliary losses over padding: each padded position
// counts as a valid token that is never selected, its router weight (or
// predictor logit) in each BCE mean against target 0 (the means over B·S)
// and σ(r) in load balancing's P_s. Note: a case without padding cannot tell
// it apart. It applies to every routed layer.
var devAuxOverPadding = layerDeviation{name: "aux_over_padding", auxOverPadding: true}

// qk_swapped: queries and keys swapped, after RoPE or before it (the
// same): token i attends to j by k_i·q_j. It sets swapQK: the layer is
// computed with Wq and Wk (and their biases) exchanged, in every block of
// a model, and the gradients exchanged back (swapQKArrays). It applies
// where skipQKSwapped finds no reason against it.
var devQKSwapped = layerDeviation{name: "qk_swapped", skip: skipQKSwapped, swapQK: true}

// skipQKSwapped says why qk_swapped does not apply to a routed layer of
// configuration cfg, or returns "".
func skipQKSwapped(cfg spec.Config) string {
	if cfg.Block.KVHeadCount() != cfg.Block.Heads {
		return "grouped-query attention has fewer key heads than query heads: a port cannot swap them"
	}
	return ""
}

// auxOverPadding recomputes every auxiliary loss with each padded position
// counted as a valid token that is never selected: its router weight (and
// predictor logit), computed from its input as at any other position,
// enters each BCE mean against a target of 0, the means divide by B·S, load
// balancing's P_s averages σ(r) over every row, and the predictor's
// accuracy counts it.
func auxOverPadding(l *layerRun) {
	ref.AuxLosses(l.cfg, l.res, l.res.Selection.Mask(), nil)
}
