package ref

import (
	"fmt"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// LayerInputs are the data a routed layer reads.
type LayerInputs struct {
	X      []*mat.Dense // residual stream entering the layer: B matrices S×d
	Valid  []int        // V_b valid tokens per row (right padding); nil: all valid
	Noise  [][]float64  // B×S N(0,1) draws of the random router; nil otherwise
	Jitter [][]float64  // B×S N(0,1) jitter eps; nil when Config.Jitter = 0
}

// Frozen is a routing decision and the stop-gradient constants that go with
// it. A forward given a Frozen (LayerForwardFrozen) is a smooth function of
// the parameters and of X, so its central finite differences are the
// gradients an autograd implementation must produce.
type Frozen struct {
	// Selection is the frozen routing decision.
	Selection Selection
	// TopK is the top-k selection under the layer's capacity whose indicator
	// is the auxiliary target t (docs/spec.md §8). It equals Selection,
	// except under causal routing (section 9): routing then follows r > 0 or
	// q > 0, while the router and the predictor still learn to predict the
	// top-k choice (the paper's Sec. 3.5).
	TopK Selection
	// STEOffset is sg(m g - g) of docs/spec.md §7 (dense compute only; nil
	// otherwise).
	STEOffset [][]float64
	// PredictorInput is sg(x), the predictor's constant input (docs/spec.md
	// §8; nil when the layer has no predictor).
	PredictorInput []*mat.Dense
}

// LayerResult is everything a routed layer computes.
type LayerResult struct {
	Out           []*mat.Dense // layer output, B matrices S×d
	Update        []*mat.Dense // f (MLP-only: the MLP update) where computed, 0 elsewhere; B×S×d
	RouterWeights [][]float64  // r (after jitter)
	Capacity      []int        // k_b: top-k capacity, or the routed count in causal mode
	Selection     Selection    // routed positions per row
	Weights       [][]float64  // g (docs/spec.md §6)
	// Multipliers are the factors applied to Update: g for the selected tokens
	// (gather), the straight-through w (dense), 0 for tokens not routed.
	Multipliers       [][]float64
	Targets           [][]float64 // t = 1 if among the top-k (Frozen.TopK)
	PredictorLogits   [][]float64 // q; nil without a predictor
	PredictorAccuracy float64     // fraction with 1[q>0] == t; 0 without a predictor
	RouterBCE         float64     // mean BCE(r, t) over valid tokens
	PredictorBCE      float64     // mean BCE(q, t); 0 without a predictor
	LoadBalance       float64     // S * sum_s F_s P_s
	// AuxLoss is AuxWeight * (RouterBCE or PredictorBCE, per Aux) +
	// LoadBalanceWeight * LoadBalance: this layer's share of the total loss.
	AuxLoss float64
	Routed  int        // valid tokens routed through the block (all rows)
	Skipped int        // valid tokens that skipped it
	FLOPs   LayerFLOPs // this layer's forward FLOPs and its dense twin's
	Frozen  Frozen     // the decision and constants to replay with LayerForwardFrozen

	acts []*rowActs // per batch row, for LayerGradients; nil otherwise
	// auxValid are the valid lengths AuxLosses last computed the auxiliary
	// losses with (nil: every position), which LayerBackward differentiates.
	auxValid []int
}

// checkLayer validates the configuration, the parameters and the inputs.
func checkLayer(cfg spec.Config, p *LayerParams, in LayerInputs) (rows, s int, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, err
	}
	if p == nil {
		return 0, 0, fmt.Errorf("layer: params are nil")
	}
	if err := p.Check(cfg); err != nil {
		return 0, 0, err
	}
	rows, s, err = batchShape("layer input X", in.X, cfg.Block.D)
	if err != nil {
		return 0, 0, err
	}
	if err := checkValid(in.Valid, rows, s); err != nil {
		return 0, 0, fmt.Errorf("layer: %w", err)
	}
	return rows, s, nil
}

// LayerForward is one routed layer (docs/spec.md §2 to §9): router
// weights, the routing decision (top-k with the layer's capacity, or the
// causal rule of section 9), then LayerForwardFrozen with that decision.
func LayerForward(cfg spec.Config, p *LayerParams, in LayerInputs) (*LayerResult, error) {
	return layerForward(cfg, p, in, false)
}

// layerForward is LayerForward; keep as for layerApply.
func layerForward(cfg spec.Config, p *LayerParams, in LayerInputs, keep bool) (*LayerResult, error) {
	rows, s, err := checkLayer(cfg, p, in)
	if err != nil {
		return nil, err
	}
	r, err := RouterWeights(cfg, p, in.X, in.Noise, in.Jitter)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	topk, err := selectTopK(cfg, r, rows, s, in.Valid)
	if err != nil {
		return nil, err
	}
	sel := topk
	switch cfg.Causal {
	case spec.CausalRouter:
		sel, err = SelectCausal(r, in.Valid)
	case spec.CausalPredictor:
		sel, err = SelectCausal(PredictorLogits(p, in.X), in.Valid)
	}
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	fz := freeze(cfg, in, sel, topk, r)
	return layerApply(cfg, p, in, fz, r, keep)
}

// selectTopK is the top-k selection of docs/spec.md §4 under the layer's
// capacity rule.
func selectTopK(cfg spec.Config, r [][]float64, rows, s int, valid []int) (Selection, error) {
	k, err := RowCapacities(cfg.Capacity, rows, s, valid)
	if err != nil {
		return Selection{}, fmt.Errorf("layer: %w", err)
	}
	sel, err := SelectTopK(r, k, valid)
	if err != nil {
		return Selection{}, fmt.Errorf("layer: %w", err)
	}
	return sel, nil
}

// NewFrozen builds the Frozen of a given selection (for instance one made by
// hand for a golden case) at the current parameters and inputs: the
// straight-through offsets sg(m g - g) (dense compute), the predictor's
// stop-gradient input sg(x), and the targets' top-k selection (sel itself,
// or under causal routing the top-k under the layer's capacity).
func NewFrozen(cfg spec.Config, p *LayerParams, in LayerInputs, sel Selection) (Frozen, error) {
	rows, s, err := checkLayer(cfg, p, in)
	if err != nil {
		return Frozen{}, err
	}
	if sel.S != s {
		return Frozen{}, fmt.Errorf("layer: selection is for S = %d, input has S = %d", sel.S, s)
	}
	if err := sel.Validate(rows, in.Valid); err != nil {
		return Frozen{}, fmt.Errorf("layer: %w", err)
	}
	r, err := RouterWeights(cfg, p, in.X, in.Noise, in.Jitter)
	if err != nil {
		return Frozen{}, fmt.Errorf("layer: %w", err)
	}
	topk := sel
	if cfg.Causal != spec.CausalOff {
		if topk, err = selectTopK(cfg, r, rows, s, in.Valid); err != nil {
			return Frozen{}, err
		}
	}
	return freeze(cfg, in, sel, topk, r), nil
}

// freeze records sel and the targets' top-k selection with the
// stop-gradient constants at router weights r.
func freeze(cfg spec.Config, in LayerInputs, sel, topk Selection, r [][]float64) Frozen {
	fz := Frozen{Selection: sel, TopK: topk}
	if cfg.Compute == spec.ComputeDense {
		g := OutputWeights(cfg.Weighting, r, sel, in.Valid)
		fz.STEOffset = StraightThroughOffsets(g, sel.Mask())
	}
	if cfg.HasPredictor() {
		fz.PredictorInput = make([]*mat.Dense, len(in.X))
		for b, xb := range in.X {
			fz.PredictorInput[b] = mat.DenseCopyOf(xb)
		}
	}
	return fz
}

// LayerForwardFrozen is one routed layer with the routing decision and the
// stop-gradient constants taken from fz instead of computed (docs/spec.md
// §5 to §8): out_i = x_i + g_i f_i(X~) for the selected i (gather), or
// x_i + w_i f_i(X) with w = g + sg(m g - g) (dense), and out_i = x_i for the
// others. Use it for finite-difference gradients.
func LayerForwardFrozen(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen) (*LayerResult, error) {
	return layerFrozen(cfg, p, in, fz, false)
}

// layerFrozen checks a frozen decision against the inputs and applies it;
// keep as for layerApply.
func layerFrozen(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen, keep bool) (*LayerResult, error) {
	rows, s, err := checkLayer(cfg, p, in)
	if err != nil {
		return nil, err
	}
	if fz.Selection.S != s {
		return nil, fmt.Errorf("layer: frozen selection is for S = %d, input has S = %d", fz.Selection.S, s)
	}
	if err := fz.Selection.Validate(rows, in.Valid); err != nil {
		return nil, fmt.Errorf("layer: frozen %w", err)
	}
	if err := fz.TopK.Validate(rows, in.Valid); err != nil {
		return nil, fmt.Errorf("layer: frozen top-k (targets) %w", err)
	}
	if cfg.Compute == spec.ComputeDense {
		if err := checkShape2("frozen STEOffset", fz.STEOffset, rows, s); err != nil {
			return nil, fmt.Errorf("layer: %w (dense compute needs the straight-through offsets)", err)
		}
	}
	if cfg.HasPredictor() {
		if _, _, err := batchShape("frozen PredictorInput", fz.PredictorInput, cfg.Block.D); err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		if len(fz.PredictorInput) != rows {
			return nil, fmt.Errorf("layer: frozen PredictorInput has %d rows, want B = %d", len(fz.PredictorInput), rows)
		}
	}
	r, err := RouterWeights(cfg, p, in.X, in.Noise, in.Jitter)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layerApply(cfg, p, in, fz, r, keep)
}

// AuxLosses sets the auxiliary losses of res (docs/spec.md §8) from its
// router weights, targets and predictor logits, m the selection mask, with
// the valid lengths valid (nil: every position counts): RouterBCE,
// LoadBalance, with a predictor PredictorBCE and PredictorAccuracy, and
// AuxLoss, this layer's share of the total loss.
//
// LayerBackward differentiates the auxiliary losses as AuxLosses last
// computed them, with valid.
func AuxLosses(cfg spec.Config, res *LayerResult, m [][]float64, valid []int) {
	res.auxValid = valid
	res.RouterBCE = RouterBCELoss(res.RouterWeights, res.Targets, valid)
	res.LoadBalance = LoadBalanceLoss(res.RouterWeights, m, valid)
	if cfg.HasPredictor() {
		res.PredictorBCE = PredictorLoss(res.PredictorLogits, res.Targets, valid)
		res.PredictorAccuracy = PredictorAccuracy(res.PredictorLogits, res.Targets, valid)
	}
	res.AuxLoss = 0
	switch cfg.Aux {
	case spec.AuxRouterBCE:
		res.AuxLoss = float64(cfg.AuxWeight * res.RouterBCE)
	case spec.AuxPredictor:
		res.AuxLoss = float64(cfg.AuxWeight * res.PredictorBCE)
	}
	res.AuxLoss += float64(cfg.LoadBalanceWeight * res.LoadBalance)
}

// GatherRows returns the rows pos of x, in that order, as a len(pos)×d
// matrix: the gathered tokens X~ of docs/spec.md §5.
func GatherRows(x *mat.Dense, pos []int) *mat.Dense {
	_, d := x.Dims()
	g := mat.NewDense(len(pos), d, nil)
	for t, i := range pos {
		g.SetRow(t, x.RawRowView(i))
	}
	return g
}

func iota(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// rowActs are one batch row's values that the layer's backward pass reads.
type rowActs struct {
	computed []int      // positions whose update was evaluated
	attn     *blockActs // MLP-only: the dense attention over the valid tokens
	blk      *blockActs // the block over the computed tokens (MLP-only: the MLP half only)
}

// routedRow is Eq. 1 for one batch row x (S×d) with v valid tokens:
// out_i = base_i + mult_i * f_i for i in computed, out_i = base_i otherwise,
// where base = x, or x' = x + Attn(N1(x)) over the valid tokens for MLP-only
// routing, and f is the block update of the computed tokens as a sequence
// (or, for MLP-only routing, MLP(N2(x'_i))). Padded positions keep x. It
// also returns the S×d update (f at the computed positions, 0 elsewhere),
// and with keep the row's values for the backward pass (computed in
// matrix form, the same bits). out is where the output is written, S×d.
func routedRow(cfg spec.Config, p *BlockParams, x, out *mat.Dense, v int, computed []int, mult []float64, keep bool) (upd *mat.Dense, acts *rowActs, err error) {
	s, d := x.Dims()
	acts = &rowActs{computed: computed}
	base := x
	if cfg.MLPOnly && v > 0 {
		var a *mat.Dense
		if keep {
			acts.attn = attentionForward(cfg.Block, p, rawRows(GatherRows(x, iota(v))), iota(v))
			a = mat.NewDense(v, d, acts.attn.a)
		} else if a, err = AttentionUpdate(cfg.Block, p, GatherRows(x, iota(v)), iota(v)); err != nil {
			return nil, nil, err
		}
		base = mat.DenseCopyOf(x)
		for i := 0; i < v; i++ {
			for j := 0; j < d; j++ {
				base.Set(i, j, x.At(i, j)+a.At(i, j))
			}
		}
	}
	out.Copy(base)
	upd = mat.NewDense(s, d, nil)
	if len(computed) == 0 {
		return upd, acts, nil
	}
	var f *mat.Dense
	switch {
	case cfg.MLPOnly:
		acts.blk = &blockActs{n: len(computed), d: d, dff: cfg.Block.DFF}
		mlpForward(cfg.Block, p, acts.blk, rawRows(GatherRows(base, computed)))
		f = mat.NewDense(acts.blk.n, d, acts.blk.m)
	case keep:
		acts.blk = blockForward(cfg.Block, p, rawRows(GatherRows(x, computed)), computed)
		f = acts.blk.update()
	default:
		if f, err = BlockUpdate(cfg.Block, p, GatherRows(x, computed), computed); err != nil {
			return nil, nil, err
		}
	}
	for t, i := range computed {
		for j := 0; j < d; j++ {
			upd.Set(i, j, f.At(t, j))
			out.Set(i, j, base.At(i, j)+float64(mult[i]*f.At(t, j)))
		}
	}
	if !keep {
		acts = nil
	}
	return upd, acts, nil
}

// layerApply computes the output, the weights and the losses for a decided
// routing fz and router weights r; with keep, also the values the backward
// pass reads (LayerResult.acts).
func layerApply(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen, r [][]float64, keep bool) (*LayerResult, error) {
	rows := len(in.X)
	s, d := in.X[0].Dims()
	sel := fz.Selection
	m := sel.Mask()
	res := &LayerResult{
		RouterWeights: r,
		Selection:     sel,
		Capacity:      make([]int, rows),
		Weights:       OutputWeights(cfg.Weighting, r, sel, in.Valid),
		Targets:       Targets(fz.TopK),
		Frozen:        fz,
		Out:           NewBatch(rows, s, d),
	}
	// The multiplier of the update: g on the selected tokens (gather), the
	// straight-through w on every valid token (dense).
	var mult [][]float64
	if cfg.Compute == spec.ComputeDense {
		mult = StraightThroughWeights(res.Weights, fz.STEOffset)
	} else {
		mult = make([][]float64, rows)
		for b := range mult {
			mult[b] = make([]float64, s)
			for _, i := range sel.Rows[b] {
				mult[b][i] = res.Weights[b][i]
			}
		}
	}
	res.Multipliers = mult

	lengths := make([]int, rows)
	for b := 0; b < rows; b++ {
		v := validLen(in.Valid, b, s)
		lengths[b] = v
		res.Capacity[b] = len(sel.Rows[b])
		res.Routed += len(sel.Rows[b])
		res.Skipped += v - len(sel.Rows[b])

		// The positions whose update is evaluated: the selected ones
		// (gather) or every valid one (dense).
		computed := sel.Rows[b]
		if cfg.Compute == spec.ComputeDense {
			computed = iota(v)
		}
		upd, acts, err := routedRow(cfg, &p.Block, in.X[b], res.Out[b], v, computed, mult[b], keep)
		if err != nil {
			return nil, fmt.Errorf("layer: row %d: %w", b, err)
		}
		res.Update = append(res.Update, upd)
		res.acts = append(res.acts, acts)
	}

	if cfg.HasPredictor() {
		res.PredictorLogits = PredictorLogits(p, fz.PredictorInput)
	}
	AuxLosses(cfg, res, m, in.Valid)
	res.FLOPs = RoutedLayerFLOPs(cfg, lengths, res.Capacity)
	return res, nil
}
