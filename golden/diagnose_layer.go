package golden

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// predictorFeed is what a deviant layer feeds its predictor.
type predictorFeed int

const (
	// feedFrozenInput is docs/spec.md §8: sg(x).
	feedFrozenInput predictorFeed = iota
	// feedLiveInput is x without stop-gradient: the predictor's loss reaches
	// the trunk.
	feedLiveInput
	// feedOutput is sg(out), the layer's output.
	feedOutput
)

// layerDeviation is a deviation of a routed layer (docs/spec.md §11),
// built from ref's pieces without changing ref: run evaluates the layer with
// ref.LayerForwardFrozen and then corrects it, so that its finite-difference
// gradient with the routing frozen is the deviant implementation's
// gradient; pass (diagnose_grad.go) evaluates it from pieces kept for a
// backward pass and returns that backward, which is how its gradients are
// taken where the deviation has one (backwardNames). In a model every
// routed layer has the deviation. The zero value is the oracle.
type layerDeviation struct {
	name string
	// skip says why the deviation cannot be emulated for a routed layer of
	// configuration cfg, or returns "".
	skip func(cfg spec.Config) string
	// capacity is the rule for each row's k.
	capacity capacityRule
	// scoreOrder runs the block on each row's selected tokens in
	// router-score order, the causal mask following that order.
	scoreOrder bool
	// windowByIndex counts the attention window in indices of the
	// gathered tokens instead of their positions.
	windowByIndex bool
	// ropeAtIndex rotates the t-th gathered token by RoPE at t instead of
	// its original position.
	ropeAtIndex bool
	// noCausalMask lets each gathered token attend to every gathered
	// token of its row, later ones included.
	noCausalMask bool
	// targetsFirstRow writes the auxiliary targets of every row into row 0
	// by position, leaving the other rows' targets 0.
	targetsFirstRow bool
	// weightMLPOnly multiplies only the MLP's update m by the weight: a
	// gathered token's output is x + a + g·m, a the attention's update.
	weightMLPOnly bool
	// firstK gathers positions 0..k−1 in the order argsort(top-k indices)
	// puts them (top-k returning its indices by descending router
	// weight), the causal mask following that order; the t-th gathered
	// token is weighted by the weight of the t-th selected token in
	// position order.
	firstK bool
	// torchTopK takes, for firstK, top-k's indices in the order
	// torch.topk(sorted=False) returns them on CPU where the candidate does
	// not show the order (torchTopKVariant).
	torchTopK bool
	// sharedRouter computes every routed layer's router weights with the
	// first routed layer's router parameters (a model's deviation).
	sharedRouter bool
	// tanhGate replaces the output weight g of every valid token by p-MoD's
	// TanhNorm, 1 + α·tanh(r) (pmodAlpha).
	tanhGate bool
	// scaleSkipped multiplies the output of every valid token outside the
	// selection by its weight g (p-MoD's STRing).
	scaleSkipped bool
	// auxOverPadding counts every padded position in the auxiliary losses
	// as a valid token that is never selected.
	auxOverPadding bool
	feed           predictorFeed
	// written is what the candidate wrote of each routed layer, by the
	// prefix of its expected arrays: the orders unsorted_indices and
	// gather_first_k take from it. nil without a candidate.
	written map[string]written
	// output replaces the layer's output (and the multipliers it reports)
	// from the live ref result; nil keeps ref's.
	output func(l *layerRun)
}

// capacityRule is how a deviant layer computes each row's capacity k.
type capacityRule int

const (
	// capacityExact is docs/spec.md §3.
	capacityExact capacityRule = iota
	// capacityOffByOne selects the tokens whose router weight is strictly
	// greater than the k-th largest, {i : r_i > r_(k)}, as the ports write
	// it: k − 1 tokens, fewer when others tie with the k-th.
	capacityOffByOne
	// capacityPlainFloor is int(c·V_b): neither float-robust nor clamped
	// to 1.
	capacityPlainFloor
)

// gathered reports whether the deviation changes how the block runs on the
// gathered tokens.
func (d *layerDeviation) gathered() bool {
	return d.scoreOrder || d.windowByIndex || d.ropeAtIndex || d.noCausalMask || d.weightMLPOnly || d.firstK
}

// cost is a rough relative cost of emulating the deviation: a block run
// again on the gathered tokens doubles a layer's work, and the unmasked one
// triples it.
func (d *layerDeviation) cost() int {
	switch {
	case d.noCausalMask:
		return 3
	case d.gathered():
		return 2
	}
	return 1
}

// layerState is a routed layer's decision and the constants frozen with it
// at the unperturbed parameters, made by the first evaluation.
type layerState struct {
	decided bool
	fz      ref.Frozen
	// g0 is the output weight g at the unperturbed point: sg(g).
	g0 [][]float64
	// order is each row's gathered positions in the order the block runs
	// them: the selected ones in router-score order (scoreOrder), or
	// positions 0..k−1 in argsort order (firstK).
	order [][]int
	// rotated caches rotatedBlock's results for indexOrderOutput.
	rotated rotationCache
	// written is what the candidate wrote of this layer.
	written written
	// sharedParams is the layer's parameters with the first routed
	// layer's router (sharedRouter), made once.
	sharedParams *ref.LayerParams
	// selectedOrder, when set, is each row's selected positions in the
	// order the deviant layer writes them: the order it ran them in, read
	// from the candidate (unsorted_indices).
	selectedOrder [][]int
}

// rotationCache holds a block's parameters with Wq and Wk rotated by RoPE,
// by rotation, for the values of Wq and Wk they were made from: a
// finite-difference pass perturbs mostly other arrays, and rotating the
// weights again for every token of every evaluation was most of the
// emulation's time.
type rotationCache struct {
	p              *ref.BlockParams
	wq, wk, bq, bk []float64
	by             map[int]*ref.BlockParams
}

// get returns rotatedBlock(c, p, delta), made once for each delta while p's
// Wq and Wk keep their values.
func (rc *rotationCache) get(c spec.BlockConfig, p *ref.BlockParams, delta int) *ref.BlockParams {
	if c.Positions != spec.PositionRoPE || delta == 0 {
		return p
	}
	wq, wk := p.Wq.RawMatrix().Data, p.Wk.RawMatrix().Data
	if rc.p != p || !slices.Equal(rc.wq, wq) || !slices.Equal(rc.wk, wk) || !slices.Equal(rc.bq, p.Bq) || !slices.Equal(rc.bk, p.Bk) {
		rc.p, rc.wq, rc.wk, rc.bq, rc.bk = p, slices.Clone(wq), slices.Clone(wk), slices.Clone(p.Bq), slices.Clone(p.Bk)
		rc.by = make(map[int]*ref.BlockParams)
	}
	r, ok := rc.by[delta]
	if !ok {
		r = rotatedBlock(c, p, delta)
		rc.by[delta] = r
	}
	return r
}

// layerRun is one evaluation of a routed layer under a deviation.
type layerRun struct {
	cfg spec.Config
	p   *ref.LayerParams
	in  ref.LayerInputs
	st  *layerState
	res *ref.LayerResult
	// out, upd and mult are the deviant output, the block's update f and
	// the factors applied to it.
	out  []*mat.Dense
	upd  []*mat.Dense
	mult [][]float64
	// weightMLPOnly says the weight multiplied only the MLP's update, so
	// that whatever else the block returns (a residual) is added
	// unweighted.
	weightMLPOnly bool
	// ran marks, by row, the positions the block ran on (the selection,
	// unless the deviation gathers others).
	ran [][]float64
}

// layerDeviations lists the emulated layer deviations, named as in
// Deviations.
func layerDeviations() []layerDeviation {
	return []layerDeviation{
		{name: "residual_twice", output: residualTwice},
		{name: "residual_scaled", output: residualScaled},
		{name: "unsorted_indices", skip: skipUnsorted, scoreOrder: true},
		{name: "no_weighting", output: noWeighting},
		{name: "ste_m_plus_1", skip: skipUnlessDense, output: steMPlusOne},
		{name: "predictor_no_stopgrad", skip: skipUnlessPredictor, feed: feedLiveInput},
		{name: "predictor_block_output", skip: skipBlockOutput, feed: feedOutput},
		{name: "capacity_off_by_one", capacity: capacityOffByOne},
		{name: "window_gathered_indices", skip: skipUnlessGatheredWindow, windowByIndex: true},
		{name: "rope_gathered_indices", skip: skipUnlessGatheredRoPE, ropeAtIndex: true},
		{name: "targets_first_row", targetsFirstRow: true}, // a case with one row cannot tell it apart
		{name: "weight_mlp_only", skip: skipWeightMLPOnly, weightMLPOnly: true},
		{name: "gather_first_k", skip: skipFirstK, firstK: true},
		{name: "capacity_floor_zero", skip: skipUnlessFloor, capacity: capacityPlainFloor},
		{name: "no_causal_mask", skip: skipNoCausalMask, noCausalMask: true},
		{name: "shared_router", skip: skipSharedRouter, sharedRouter: true},
		{name: "tanh_gate", skip: skipTanhGate, tanhGate: true},
		{name: "skipped_scaled", skip: skipSkippedScaled, scaleSkipped: true},
		{name: "aux_over_padding", auxOverPadding: true}, // a case without padding cannot tell it apart
	}
}

// pmodAlpha is the α of p-MoD's TanhNorm, g = 1 + α·tanh(r): the scale of
// its released training configurations (mod_weight_norm "tanh_0.2_1",
// 0.2·tanh(r) + 1; Zhang et al., arXiv 2412.04449).
const pmodAlpha = 0.2

func skipTanhGate(cfg spec.Config) string {
	if cfg.Compute == spec.ComputeDense {
		return "p-MoD gathers the selected tokens; its gate under dense compute's straight-through weight is not a port anyone wrote"
	}
	return ""
}

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

func skipSharedRouter(cfg spec.Config) string {
	if cfg.Router != spec.RouterLinear && cfg.Router != spec.RouterLinearBias {
		return fmt.Sprintf("router %q has no parameters to share", cfg.Router)
	}
	return ""
}

func skipWeightMLPOnly(cfg spec.Config) string {
	switch {
	case cfg.MLPOnly:
		return "MLP-only routing weights only the MLP's update already; attention runs densely outside the routed part"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute's straight-through weight multiplies every token's whole update; the ports that weight only the MLP's update gather"
	}
	return ""
}

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

func skipUnlessGatheredRoPE(cfg spec.Config) string {
	switch {
	case cfg.Block.Positions != spec.PositionRoPE:
		return "the block has no rotary embeddings"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute runs the block on every valid token, whose indices are their positions"
	case cfg.MLPOnly:
		return "MLP-only routing runs attention over every valid token, whose indices are their positions"
	}
	return ""
}

func skipUnlessFloor(cfg spec.Config) string {
	if cfg.Capacity.Kind == spec.CapacityInteger {
		return "an integer capacity has no floor"
	}
	return ""
}

func skipUnlessGatheredWindow(cfg spec.Config) string {
	switch {
	case cfg.Block.Window == 0:
		return "the block has no attention window"
	case cfg.Compute == spec.ComputeDense:
		return "dense compute runs the block on every valid token, whose indices are their positions"
	case cfg.MLPOnly:
		return "MLP-only routing runs attention over every valid token, whose indices are their positions"
	}
	return ""
}

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

func skipUnlessDense(cfg spec.Config) string {
	if cfg.Compute != spec.ComputeDense {
		return "the straight-through weight exists only with dense compute (docs/spec.md §7)"
	}
	return ""
}

func skipUnlessPredictor(cfg spec.Config) string {
	if !cfg.HasPredictor() {
		return "the layer has no predictor"
	}
	return ""
}

func skipBlockOutput(cfg spec.Config) string {
	if why := skipUnlessPredictor(cfg); why != "" {
		return why
	}
	if cfg.Causal == spec.CausalPredictor {
		return "the predictor decides the routing, so it runs before the block and cannot be fed its output"
	}
	return ""
}

// run evaluates a routed layer under the deviation, deciding the routing on
// the first call.
func (d *layerDeviation) run(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, st *layerState) (*layerRun, error) {
	if !st.decided {
		if err := d.decide(cfg, p, in, st); err != nil {
			return nil, err
		}
	}
	fz := st.fz
	if d.feed == feedLiveInput {
		fz.PredictorInput = in.X
	}
	res, err := ref.LayerForwardFrozen(cfg, p, in, fz)
	if err != nil {
		return nil, err
	}
	l := &layerRun{cfg: cfg, p: p, in: in, st: st, res: res, out: res.Out, upd: res.Update, mult: res.Multipliers,
		weightMLPOnly: d.weightMLPOnly, ran: res.Frozen.Selection.Mask()}
	if d.gathered() {
		d.regather(l)
	}
	if d.tanhGate {
		tanhGate(l)
	}
	if d.output != nil {
		d.output(l)
	}
	if d.scaleSkipped {
		scaleSkipped(l)
	}
	if d.auxOverPadding {
		auxOverPadding(l)
	}
	return l, nil
}

// decide makes the routing decision at the current (unperturbed) point, as
// the deviant implementation would, and freezes it with its constants.
func (d *layerDeviation) decide(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, st *layerState) error {
	res, err := ref.LayerForward(cfg, p, in)
	if err != nil {
		return err
	}
	st.fz = res.Frozen
	ref0 := cloneDecision(res.Frozen)
	if d.capacity != capacityExact {
		// The deviant k of the top-k: the routing itself without causal
		// routing; under causal routing (docs/spec.md §8, §9) the routing
		// follows the sign and only the auxiliary targets change.
		s, _ := in.X[0].Dims()
		k, err := d.rowCapacities(cfg.Capacity, len(in.X), s, in.Valid)
		if err != nil {
			return err
		}
		if d.capacity == capacityOffByOne {
			if k, err = ref.RowCapacities(cfg.Capacity, len(in.X), s, in.Valid); err != nil {
				return err
			}
			k = aboveKth(res.RouterWeights, k, in.Valid)
		}
		short, err := ref.SelectTopK(res.RouterWeights, k, in.Valid)
		if err != nil {
			return err
		}
		if cfg.Causal == spec.CausalOff {
			if st.fz, err = ref.NewFrozen(cfg, p, in, short); err != nil {
				return err
			}
		} else {
			st.fz.TopK = short
		}
	}
	if d.targetsFirstRow {
		st.fz.TopK = firstRowTargets(st.fz.TopK, in.Valid)
	}
	if !sameDecision(ref0, st.fz) {
		// The decision changed: the layer at it. (Otherwise it is ref's,
		// and LayerForward's result is the frozen forward's, bit for bit.)
		if res, err = ref.LayerForwardFrozen(cfg, p, in, st.fz); err != nil {
			return err
		}
	}
	st.g0 = res.Weights
	if d.scoreOrder {
		st.order = scoreOrder(res.RouterWeights, st.fz.Selection)
		if o, ok := st.written.unsortedOrder(st.fz.Selection); ok {
			for b := range o {
				if o[b] != nil {
					st.order[b] = o[b]
				}
			}
			st.selectedOrder = st.order
		}
	}
	if d.firstK {
		returned, ok := st.written.returnedOrder(st.fz.Selection, res.Multipliers)
		if !ok {
			returned = scoreOrder(res.RouterWeights, st.fz.Selection)
			if d.torchTopK {
				returned = torchTopKOrder(res.RouterWeights, st.fz.Selection, in.Valid, returned)
			}
		}
		st.order = firstKOrder(returned)
	}
	if d.feed == feedOutput {
		st.fz.PredictorInput = make([]*mat.Dense, len(res.Out))
		for b, o := range res.Out {
			st.fz.PredictorInput[b] = mat.DenseCopyOf(o)
		}
	}
	st.decided = true
	return nil
}

// decision is a copy of what a deviation may change of a frozen routing
// decision before the layer is run at it.
type decision struct {
	sel, topk [][]int
	ste       [][]float64
	pred      []*mat.Dense
}

// cloneDecision copies fz's selection, top-k and straight-through offsets
// (the predictor's input by reference).
func cloneDecision(fz ref.Frozen) decision {
	d := decision{pred: fz.PredictorInput}
	for _, r := range fz.Selection.Rows {
		d.sel = append(d.sel, slices.Clone(r))
	}
	for _, r := range fz.TopK.Rows {
		d.topk = append(d.topk, slices.Clone(r))
	}
	for _, r := range fz.STEOffset {
		d.ste = append(d.ste, slices.Clone(r))
	}
	return d
}

// sameDecision reports whether fz is still the decision d copied.
func sameDecision(d decision, fz ref.Frozen) bool {
	eq := func(a, b [][]int) bool { return slices.EqualFunc(a, b, slices.Equal) }
	return eq(d.sel, fz.Selection.Rows) && eq(d.topk, fz.TopK.Rows) &&
		slices.EqualFunc(d.ste, fz.STEOffset, slices.Equal) && slices.Equal(d.pred, fz.PredictorInput)
}

// aboveKth is, for each row, how many valid router weights are strictly
// greater than the row's k[b]-th largest: the selection {i : r_i > r_(k)}
// is the top that many, so ref.SelectTopK makes it. Without a tie at the
// k-th weight it is k − 1; every weight tied with the k-th is dropped with
// it.
func aboveKth(r [][]float64, k []int, valid []int) []int {
	n := make([]int, len(r))
	for b, row := range r {
		v := row[:validLen(valid, b, len(row))]
		if k[b] < 1 || k[b] > len(v) {
			continue
		}
		sorted := slices.Clone(v)
		slices.SortFunc(sorted, func(a, b float64) int { return cmp.Compare(b, a) })
		for _, x := range v {
			if x > sorted[k[b]-1] {
				n[b]++
			}
		}
	}
	return n
}

// rowCapacities is each row's k under the deviation's capacity rule (for
// capacityOffByOne, k − 1: the count without ties, which aboveKth
// corrects).
func (d *layerDeviation) rowCapacities(c spec.Capacity, rows, s int, valid []int) ([]int, error) {
	k, err := ref.RowCapacities(c, rows, s, valid)
	if err != nil {
		return nil, err
	}
	for b := range k {
		n := s
		if valid != nil {
			n = valid[b]
		}
		switch {
		case d.capacity == capacityOffByOne:
			k[b] = max(k[b]-1, 0)
		case d.capacity == capacityPlainFloor && n > 0 && c.Kind == spec.CapacityRatio:
			k[b] = min(int(float64(c.Ratio*float64(n))), n)
		case d.capacity == capacityPlainFloor && n > 0 && c.Kind == spec.CapacityLog:
			ratio, err := ref.LogCapacityRatio(c.Ratio, n, c.MaxLen)
			if err != nil {
				return nil, err
			}
			k[b] = min(int(float64(float64(n)*ratio)), n)
		}
	}
	return k, nil
}

// firstRowTargets is the top-k whose indicator the seed blog's auxiliary
// targets are: a zero vector of B·S entries indexed by every row's selected
// positions, which all fall in row 0 (docs/spec.md §11, targets_first_row).
// Positions past row 0's valid length are dropped, as padded positions
// count in no loss.
func firstRowTargets(topk ref.Selection, valid []int) ref.Selection {
	n := topk.S
	if valid != nil {
		n = valid[0]
	}
	var union []int
	for _, row := range topk.Rows {
		for _, p := range row {
			if p < n {
				union = append(union, p)
			}
		}
	}
	slices.Sort(union)
	rows := make([][]int, len(topk.Rows))
	rows[0] = slices.Compact(union)
	return ref.Selection{S: topk.S, Rows: rows}
}

// scoreOrder lists each row's selected positions by descending router
// weight, ties to the lower position: the order top-k returns them in.
func scoreOrder(r [][]float64, sel ref.Selection) [][]int {
	order := make([][]int, len(sel.Rows))
	for b, pos := range sel.Rows {
		o := append([]int(nil), pos...)
		sort.SliceStable(o, func(i, j int) bool { return r[b][o[i]] > r[b][o[j]] })
		order[b] = o
	}
	return order
}

// firstKOrder is, for each row's selected positions in the order top-k
// returns them (score), argsort of them: the indices 0..k−1 into that list
// in ascending order of the positions they hold. A port that gathers these
// indices as if they were positions runs the block on positions 0..k−1,
// the t-th gathered being argsort's t-th (docs/spec.md §11,
// gather_first_k).
func firstKOrder(score [][]int) [][]int {
	order := make([][]int, len(score))
	for b, s := range score {
		idx := make([]int, len(s))
		for t := range idx {
			idx[t] = t
		}
		sort.Slice(idx, func(i, j int) bool { return s[idx[i]] < s[idx[j]] })
		order[b] = idx
	}
	return order
}

// base is the residual the block's update is added to: x, or for MLP-only
// routing x' = x + Attn(N1(x)), recovered as out − mult·f.
func (l *layerRun) base() []*mat.Dense {
	if !l.cfg.MLPOnly {
		return l.in.X
	}
	out := make([]*mat.Dense, len(l.res.Out))
	for b, o := range l.res.Out {
		s, d := o.Dims()
		out[b] = mat.NewDense(s, d, nil)
		for i := 0; i < s; i++ {
			for j := 0; j < d; j++ {
				out[b].Set(i, j, o.At(i, j)-float64(l.res.Multipliers[b][i]*l.res.Update[b].At(i, j)))
			}
		}
	}
	return out
}

// eachRow returns new outputs whose row i of batch row b is
// f(b, i, base row, out row, update row, multiplier), out and update as
// the block ran (regather may have changed ref's).
func (l *layerRun) eachRow(f func(b, i int, x, out, upd []float64, mult float64) []float64) []*mat.Dense {
	base := l.base()
	res := make([]*mat.Dense, len(l.out))
	for b, o := range l.out {
		s, d := o.Dims()
		res[b] = mat.NewDense(s, d, nil)
		for i := 0; i < s; i++ {
			res[b].SetRow(i, f(b, i, base[b].RawRowView(i), o.RawRowView(i), l.upd[b].RawRowView(i), l.mult[b][i]))
		}
	}
	return res
}

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

// tanhGate is p-MoD's TanhNorm in place of the configured weighting: every
// valid token's weight is g = 1 + α·tanh(r) (reported as the weights), and
// a token the block ran on outputs x + g·f (its multiplier g).
func tanhGate(l *layerRun) {
	r := l.res.RouterWeights
	g, mult := make([][]float64, len(r)), make([][]float64, len(r))
	for b, row := range r {
		g[b], mult[b] = make([]float64, len(row)), make([]float64, len(row))
		for i := range validLen(l.in.Valid, b, len(row)) {
			g[b][i] = 1 + float64(pmodAlpha*math.Tanh(row[i]))
			if l.ran[b][i] != 0 {
				mult[b][i] = g[b][i]
			}
		}
	}
	l.res.Weights, l.mult = g, mult
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

// scaleSkipped is p-MoD's STRing: every valid token outside the selection
// outputs g·x (g·x' under MLP-only routing) instead of passing unchanged,
// g its weight as reported.
func scaleSkipped(l *layerRun) {
	m, g := l.res.Selection.Mask(), l.res.Weights
	l.out = l.eachRow(func(b, i int, _, out, _ []float64, _ float64) []float64 {
		if m[b][i] != 0 || i >= validLen(l.in.Valid, b, len(m[b])) {
			return out
		}
		row := make([]float64, len(out))
		for j := range row {
			row[j] = float64(g[b][i] * out[j])
		}
		return row
	})
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

// regather runs the block on each row's gathered tokens as the deviation
// gathers them, replacing the update and the output of those tokens: the
// t-th token of a row (the selected ones in position order, or in
// router-score order for scoreOrder; positions 0..k−1 in argsort order for
// firstK) is fed to ref's KV cache at its original position p_t, or at t
// when the causal mask or the window follow the gathered order (scoreOrder,
// windowByIndex, firstK); ref's window and mask by the fed position are
// then exactly the deviant ones. RoPE rotates it at p_t, or at t for
// ropeAtIndex: fed at position φ and meant to turn at ρ, Wq and Wk are
// rotated by ρ − φ, since RoPE(x·Wq·R(ρ − φ), φ) = RoPE(x·Wq, ρ) (rotations
// in the same planes add their angles). Under firstK the t-th gathered
// token's factor is the multiplier of the t-th selected position, and mult
// and ran are replaced to say so.
func (d *layerDeviation) regather(l *layerRun) {
	blk := l.cfg.Block
	sel := l.res.Frozen.Selection.Rows
	order := sel
	if d.scoreOrder || d.firstK {
		order = l.st.order
	}
	if d.firstK {
		l.mult, l.ran = make([][]float64, len(l.in.X)), make([][]float64, len(l.in.X))
	}
	l.out, l.upd = make([]*mat.Dense, len(l.in.X)), make([]*mat.Dense, len(l.in.X))
	for b, x := range l.in.X {
		o := mat.DenseCopyOf(x)
		s, dm := x.Dims()
		u := mat.NewDense(s, dm, nil)
		if d.noCausalMask {
			d.unmasked(l, b, order[b], o, u)
			l.out[b], l.upd[b] = o, u
			continue
		}
		if d.firstK {
			l.mult[b], l.ran[b] = make([]float64, s), make([]float64, s)
		}
		var kv ref.KVCache
		for t, i := range order[b] {
			fed, rot := i, i
			if d.scoreOrder || d.windowByIndex || d.firstK {
				fed = t
			}
			if d.ropeAtIndex {
				rot = t
			}
			a, m := kv.BlockStepParts(blk, l.st.rotated.get(blk, &l.p.Block, rot-fed), x.RawRowView(i), fed)
			g := l.res.Multipliers[b][i]
			if d.firstK {
				g = l.res.Multipliers[b][sel[b][t]]
				l.mult[b][i], l.ran[b][i] = g, 1
			}
			d.write(x.RawRowView(i), a, m, g, o.RawRowView(i), u.RawRowView(i))
		}
		l.out[b], l.upd[b] = o, u
	}
}

// write sets a gathered token's update u = f = a + m and its output o,
// x + g·f, or x + a + g·m under weightMLPOnly.
func (d *layerDeviation) write(x, a, m []float64, g float64, o, u []float64) {
	for j := range x {
		u[j] = a[j] + m[j]
		if d.weightMLPOnly {
			o[j] = x[j] + a[j] + float64(g*m[j])
		} else {
			o[j] = x[j] + float64(g*u[j])
		}
	}
}

// unmasked is regather for no_causal_mask on row b, writing the update and
// the output of each selected token into u and o: every selected token's
// key and value are made first, by ref's attention at its original position
// on a scratch cache; then each token, fed at position S after a cache of
// all the others (so that every one of them is at or before it) with Wq
// and Wk rotated by p_t − S (so that its query and key turn at p_t),
// attends to all of them and to itself.
func (d *layerDeviation) unmasked(l *layerRun, b int, sel []int, o, u *mat.Dense) {
	blk := l.cfg.Block
	x := l.in.X[b]
	s, _ := x.Dims()
	var all ref.KVCache
	for _, i := range sel {
		all.AttentionStep(blk, &l.p.Block, x.RawRowView(i), i)
	}
	for t, i := range sel {
		var kv ref.KVCache
		for v, p := range all.Positions {
			if v != t {
				kv.Positions = append(kv.Positions, p)
				kv.Keys = append(kv.Keys, all.Keys[v])
				kv.Values = append(kv.Values, all.Values[v])
			}
		}
		a, m := kv.BlockStepParts(blk, l.st.rotated.get(blk, &l.p.Block, i-s), x.RawRowView(i), s)
		d.write(x.RawRowView(i), a, m, l.res.Multipliers[b][i], o.RawRowView(i), u.RawRowView(i))
	}
}

// rotatedBlock returns the block's parameters with the columns of Wq and Wk
// (and the biases of q and k) rotated by RoPE at position delta, head by
// head (unchanged without RoPE).
func rotatedBlock(c spec.BlockConfig, p *ref.BlockParams, delta int) *ref.BlockParams {
	if c.Positions != spec.PositionRoPE || delta == 0 {
		return p
	}
	q := *p
	q.Wq, q.Wk = rotateHeads(c, p.Wq, delta), rotateHeads(c, p.Wk, delta)
	if p.Bq != nil {
		q.Bq = rotateHeads(c, mat.NewDense(1, len(p.Bq), p.Bq), delta).RawRowView(0)
		q.Bk = rotateHeads(c, mat.NewDense(1, len(p.Bk), p.Bk), delta).RawRowView(0)
	}
	return &q
}

// rotateHeads rotates each head's d_h columns of w: Heads of them in Wq,
// KVHeads in Wk (grouped-query attention).
func rotateHeads(c spec.BlockConfig, w *mat.Dense, delta int) *mat.Dense {
	rows, cols := w.Dims()
	dh := c.D / c.Heads
	out := mat.NewDense(rows, cols, nil)
	for i := 0; i < rows; i++ {
		src, dst := w.RawRowView(i), out.RawRowView(i)
		for h := 0; h < cols/dh; h++ {
			copy(dst[h*dh:(h+1)*dh], ref.RoPE(src[h*dh:(h+1)*dh], delta, c.RoPEBase))
		}
	}
	return out
}

// combineNames is the deviation that has every named one at once: its name
// joins theirs with "+". It is false when a name has no layer emulation or
// two of them change the same thing (the capacity, the predictor's input,
// the output formula, the tokens the block runs on and their order, the
// weighting of the update).
func combineNames(names []string) (layerDeviation, bool) {
	var c layerDeviation
	var skips []func(spec.Config) string
	for _, n := range names {
		d, ok := findLayerDeviation(n)
		if !ok {
			return c, false
		}
		if (d.capacity != capacityExact && c.capacity != capacityExact) ||
			(d.feed != feedFrozenInput && c.feed != feedFrozenInput) ||
			(d.output != nil && c.output != nil) {
			return c, false
		}
		if d.capacity != capacityExact {
			c.capacity = d.capacity
		}
		if d.feed != feedFrozenInput {
			c.feed = d.feed
		}
		if d.output != nil {
			c.output = d.output
		}
		c.scoreOrder = c.scoreOrder || d.scoreOrder
		c.windowByIndex = c.windowByIndex || d.windowByIndex
		c.ropeAtIndex = c.ropeAtIndex || d.ropeAtIndex
		c.targetsFirstRow = c.targetsFirstRow || d.targetsFirstRow
		c.noCausalMask = c.noCausalMask || d.noCausalMask
		c.weightMLPOnly = c.weightMLPOnly || d.weightMLPOnly
		c.firstK = c.firstK || d.firstK
		c.sharedRouter = c.sharedRouter || d.sharedRouter
		c.tanhGate = c.tanhGate || d.tanhGate
		c.scaleSkipped = c.scaleSkipped || d.scaleSkipped
		c.auxOverPadding = c.auxOverPadding || d.auxOverPadding
		if d.skip != nil {
			skips = append(skips, d.skip)
		}
	}
	if c.noCausalMask && (c.scoreOrder || c.windowByIndex || c.ropeAtIndex || c.firstK) {
		return c, false // the unmasked block feeds its tokens its own way
	}
	if c.scoreOrder && c.firstK {
		return c, false // both say which tokens the block runs on, in which order
	}
	if c.weightMLPOnly && (slices.Contains(names, "residual_scaled") || slices.Contains(names, "no_weighting")) {
		return c, false // their outputs say how the whole update is weighted
	}
	if c.tanhGate && (c.firstK || c.weightMLPOnly || slices.Contains(names, "no_weighting")) {
		return c, false // each says which weight multiplies which update
	}
	if c.scaleSkipped && c.firstK {
		return c, false // the block runs on other tokens than the selected ones
	}
	c.name = strings.Join(names, "+")
	c.skip = func(cfg spec.Config) string {
		for _, skip := range skips {
			if why := skip(cfg); why != "" {
				return why
			}
		}
		return ""
	}
	return c, true
}

// combineVariant is combineNames with gather_first_k in variant: "" or
// torchTopKVariant, which only a set holding gather_first_k can have.
func combineVariant(names []string, variant string) (layerDeviation, bool) {
	d, ok := combineNames(names)
	switch {
	case !ok || variant == "":
		return d, ok
	case variant != torchTopKVariant || !d.firstK:
		return d, false
	}
	d.torchTopK = true
	return d, true
}

// withTorchTopK adds, after gather_first_k where it is emulated, its
// variant with top-k's order as torch.topk(sorted=False) returns it on CPU
// (torchTopKVariant), for a candidate whose multipliers do not show the
// order (a model's, or one that leaves them out): where they show it, both
// take it from them.
func withTorchTopK(ems []emulation, devs []layerDeviation) ([]emulation, []layerDeviation) {
	i := slices.IndexFunc(ems, func(em emulation) bool { return em.name == "gather_first_k" && em.reason == "" })
	if i < 0 {
		return ems, devs
	}
	d := devs[i]
	d.torchTopK = true
	return slices.Insert(ems, i+1, emulation{name: ems[i].name, variant: torchTopKVariant}), slices.Insert(devs, i+1, d)
}

// sharedInLayerCase is why shared_router is not emulated for a layer case.
const sharedInLayerCase = "a layer case has one routed layer (model cases with two or more test it)"

// findLayerDeviation returns the emulation of a deviation name.
func findLayerDeviation(name string) (layerDeviation, bool) {
	for _, d := range layerDeviations() {
		if d.name == name {
			return d, true
		}
	}
	return layerDeviation{}, false
}

// layerSpecOf is the generator's description of a layer case.
func layerSpecOf(c *Case) layerSpec {
	m := c.Manifest
	cfg := m.Config
	return layerSpec{name: m.Name, description: m.Description, catches: m.Catches,
		batch: cfg.Batch, seqLen: cfg.SeqLen, valid: cfg.ValidLengths, cfg: *cfg.Layer, ties: m.Routing.Ties}
}

// emulateLayerCase recomputes a layer case under each deviation, with what
// the candidate wrote (w).
func emulateLayerCase(c *Case, w map[string]written, progress func(done, total int)) ([]emulation, error) {
	ems, devs, err := layerEmulations(c, w)
	if err != nil {
		return nil, err
	}
	s := layerSpecOf(c)
	err = emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, func(i int) (map[string]*Array, error) { return layerArrays(c, s, &devs[i]) })
	shareArrays(ems)
	return ems, err
}

// layerEmulations lists the emulations of a layer case and their
// deviations, each with the reason it is not emulated, or the arrays it
// shares (shareEffective), or neither: to be computed.
func layerEmulations(c *Case, w map[string]written) ([]emulation, []layerDeviation, error) {
	if c.Manifest.Config.Layer == nil {
		return nil, nil, fmt.Errorf("layer case without a layer configuration")
	}
	s := layerSpecOf(c)
	if err := s.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	var ems []emulation
	devs := make([]layerDeviation, len(Deviations))
	for i, dev := range Deviations {
		ld, ok := findLayerDeviation(dev.Name)
		switch {
		case isMoDEDeviation(dev.Name):
			ems = append(ems, notEmulated(dev.Name, "a layer case has no experts (mode cases test it)"))
		case !ok:
			ems = append(ems, notEmulated(dev.Name, "a layer case has no incremental decoding (decode cases test it)"))
		case ld.sharedRouter:
			ems = append(ems, notEmulated(dev.Name, sharedInLayerCase))
		case ld.skip != nil && ld.skip(s.cfg) != "":
			ems = append(ems, notEmulated(dev.Name, ld.skip(s.cfg)))
		default:
			ems = append(ems, emulation{name: dev.Name})
		}
		ld.written = w
		devs[i] = ld
	}
	if !w["expected."].showsOrder(c) {
		ems, devs = withTorchTopK(ems, devs)
	}
	refuseFD(c, devs, ems)
	if err := shareEffective(c, devs, ems, []spec.Config{s.cfg}); err != nil {
		return nil, nil, err
	}
	return ems, devs, nil
}

// shareEffective finds the deviations that compute exactly what another
// one, or the oracle, computes on this case, so that each computation is
// made once: a capacity rule whose k equals the exact rule's, or the
// off-by-one's, in every row of every routed layer (configurations cfgs)
// is that rule, other targets change nothing in a model case whose
// layers train no auxiliary loss, and the weight on the MLP's update alone
// is the weight on the whole update where every layer's g is 1. An emulation that is the oracle gets the case's own
// expected arrays; one that repeats an earlier one records it in
// ems[i].repeats, and shareArrays copies the arrays after the computation.
func shareEffective(c *Case, devs []layerDeviation, ems []emulation, cfgs []spec.Config) error {
	first := map[string]int{}
	for i := range ems {
		if ems[i].reason != "" {
			continue
		}
		d := devs[i]
		if d.capacity == capacityPlainFloor {
			same, err := sameCapacities(c, cfgs, capacityPlainFloor, capacityExact)
			if err != nil {
				return err
			}
			off, err := sameCapacities(c, cfgs, capacityPlainFloor, capacityOffByOne)
			if err != nil {
				return err
			}
			off = off && noTieAtKth(c)
			switch {
			case same:
				d.capacity = capacityExact
			case off:
				d.capacity = capacityOffByOne
			}
		}
		if d.weightMLPOnly && !weighted(cfgs) {
			// g = 1: x + a + g·m is x + g·(a + m).
			d.weightMLPOnly = false
		}
		if d.targetsFirstRow && c.Manifest.Kind == KindModel && !auxReadsTargets(cfgs) {
			// A model case reports no targets, and no layer's loss reads them.
			d.targetsFirstRow = false
		}
		if d.auxOverPadding && !padded(c) {
			// Without padding every position counts in the losses already.
			d.auxOverPadding = false
		}
		if d.capacity == capacityExact && !d.gathered() && !d.targetsFirstRow && d.feed == feedFrozenInput && d.output == nil && !d.sharedRouter &&
			!d.tanhGate && !d.scaleSkipped && !d.auxOverPadding {
			ems[i].arrays = expectedArrays(c)
			continue
		}
		key := fmt.Sprintf("%d %t %t %t %t %t %t %t %t %t %t %t %t %d %p", d.capacity, d.scoreOrder, d.windowByIndex, d.ropeAtIndex, d.noCausalMask, d.targetsFirstRow, d.weightMLPOnly, d.firstK, d.torchTopK, d.sharedRouter,
			d.tanhGate, d.scaleSkipped, d.auxOverPadding, d.feed, d.output)
		if j, ok := first[key]; ok {
			ems[i].repeats = j + 1
			ems[i].arrays = map[string]*Array{} // not computed; shareArrays fills it
			continue
		}
		first[key] = i
	}
	return nil
}

// noTieAtKth reports whether c is a layer case in each of whose rows the
// k-th largest router weight is tied with no other, so that the strict
// rule of capacity_off_by_one selects exactly the top k − 1. (In a model
// case a deviation changes the router weights of the layers after the
// first, so nothing is known before they are computed.)
func noTieAtKth(c *Case) bool {
	cfg := c.Manifest.Config
	r, ok := c.Arrays["expected.router_logits"]
	if c.Manifest.Kind != KindLayer || cfg.Layer == nil || !ok || len(r.Shape) != 2 {
		return false
	}
	k, err := ref.RowCapacities(cfg.Layer.Capacity, cfg.Batch, cfg.SeqLen, cfg.ValidLengths)
	if err != nil {
		return false
	}
	for b, n := range aboveKth(field(r), k, cfg.ValidLengths) {
		if n != max(k[b]-1, 0) {
			return false
		}
	}
	return true
}

// padded reports whether some row of the case has a padded position.
func padded(c *Case) bool {
	return hasPadding(c.Manifest.Config.ValidLengths, c.Manifest.Config.SeqLen)
}

// weighted reports whether some layer's output weight g is not 1.
func weighted(cfgs []spec.Config) bool {
	for _, cfg := range cfgs {
		if cfg.Weighting != spec.WeightNone {
			return true
		}
	}
	return false
}

// auxReadsTargets reports whether some layer's loss reads the auxiliary
// targets: an auxiliary loss with a weight other than 0.
func auxReadsTargets(cfgs []spec.Config) bool {
	for _, cfg := range cfgs {
		if cfg.Aux != spec.AuxNone && cfg.AuxWeight != 0 {
			return true
		}
	}
	return false
}

// sameCapacities reports whether capacity rules a and b give the same k in
// every row of every configuration.
func sameCapacities(c *Case, cfgs []spec.Config, a, b capacityRule) (bool, error) {
	m := c.Manifest.Config
	for _, cfg := range cfgs {
		ka, err := (&layerDeviation{capacity: a}).rowCapacities(cfg.Capacity, m.Batch, m.SeqLen, m.ValidLengths)
		if err != nil {
			return false, err
		}
		kb, err := (&layerDeviation{capacity: b}).rowCapacities(cfg.Capacity, m.Batch, m.SeqLen, m.ValidLengths)
		if err != nil {
			return false, err
		}
		if !slices.Equal(ka, kb) {
			return false, nil
		}
	}
	return true, nil
}

// shareArrays gives each emulation that repeats another the other's
// arrays.
func shareArrays(ems []emulation) {
	for i := range ems {
		if ems[i].repeats > 0 {
			ems[i].arrays = ems[ems[i].repeats-1].arrays
		}
	}
}

// expectedArrays is the case's own expected arrays.
func expectedArrays(c *Case) map[string]*Array {
	arrays := make(map[string]*Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == RoleExpected {
			arrays[info.Name] = c.Arrays[info.Name]
		}
	}
	return arrays
}

// emulateDeviations fills ems[i] with the case recomputed under devs[i]
// (a layer or model case), or the reason it cannot be.
func emulateDeviations(c *Case, devs []layerDeviation, ems []emulation, progress func(done, total int)) error {
	switch c.Manifest.Kind {
	case KindLayer:
		s := layerSpecOf(c)
		for i, d := range devs {
			switch {
			case d.sharedRouter:
				ems[i].reason = sharedInLayerCase
			case d.skip != nil:
				ems[i].reason = d.skip(s.cfg)
			}
		}
		refuseFD(c, devs, ems)
		if err := shareEffective(c, devs, ems, []spec.Config{s.cfg}); err != nil {
			return err
		}
		err := emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, func(i int) (map[string]*Array, error) { return layerArrays(c, s, &devs[i]) })
		shareArrays(ems)
		return err
	case KindModel:
		s := modelSpecOf(c)
		for i, d := range devs {
			ems[i].reason = skipModel(s.cfg, d)
		}
		refuseFD(c, devs, ems)
		if err := shareEffective(c, devs, ems, routedConfigs(s.cfg)); err != nil {
			return err
		}
		err := emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, func(i int) (map[string]*Array, error) { return modelArrays(c, s, &devs[i]) })
		shareArrays(ems)
		return err
	}
	return fmt.Errorf("kind %q has no combined emulation", c.Manifest.Kind)
}

// layerArrays computes a layer case's expected arrays under deviation d, as
// the generator does for the oracle: forward values at the case's inputs and
// parameters, and gradients of sum(upstream.out * out) + aux.total with
// the routing frozen, by d's backward pass (layerArraysAnalytic) where it
// has one, else by finite differences (layerArraysFD).
func layerArrays(c *Case, s layerSpec, d *layerDeviation) (map[string]*Array, error) {
	if d.hasBackward() {
		return layerArraysAnalytic(c, s, d)
	}
	return layerArraysFD(c, s, d)
}

// layerValueArrays are a layer case's forward arrays of the evaluation l
// under a deviation whose decided routing is st.
func layerValueArrays(c *Case, s layerSpec, l *layerRun, st *layerState) (map[string]*Array, error) {
	selected, err := selectedLike(c, "expected.selected", st.writtenSelection(l.res.Selection))
	if err != nil {
		return nil, err
	}
	res := l.res
	arrays := map[string]*Array{
		"expected.out":              batchArray(l.out),
		"expected.router_logits":    fieldArray(res.RouterWeights, s.valid),
		"expected.selected":         selected,
		"expected.weights":          fieldArray(res.Weights, s.valid),
		"expected.multipliers":      fieldArray(l.mult, s.valid),
		"expected.targets":          fieldArray(res.Targets, s.valid),
		"expected.aux.router_bce":   Scalar(res.RouterBCE),
		"expected.aux.load_balance": Scalar(res.LoadBalance),
		"expected.aux.total":        Scalar(res.AuxLoss),
	}
	if s.cfg.HasPredictor() {
		arrays["expected.predictor_logits"] = fieldArray(res.PredictorLogits, s.valid)
		arrays["expected.predictor_accuracy"] = Scalar(res.PredictorAccuracy)
		arrays["expected.aux.predictor_bce"] = Scalar(res.PredictorBCE)
	}
	return arrays, nil
}

// layerArraysFD is layerArrays with the gradients by ref.FDGradient over
// run: the test oracle of the backward passes
// (TestAnalyticDeviantGradientsAreTheFiniteDifferences), and the way of a
// deviation that has none yet, at sizes within maxFDWork.
func layerArraysFD(c *Case, s layerSpec, d *layerDeviation) (map[string]*Array, error) {
	dr, err := layerDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	st := layerState{written: d.writtenFor("expected.")}
	l, err := d.run(s.cfg, dr.p, dr.in, &st)
	if err != nil {
		return nil, err
	}
	arrays, err := layerValueArrays(c, s, l, &st)
	if err != nil {
		return nil, err
	}
	loss := func() (float64, error) {
		l, err := d.run(s.cfg, dr.p, dr.in, &st)
		if err != nil {
			return 0, err
		}
		return dot(l.out, dr.u) + l.res.AuxLoss, nil
	}
	v, err := loss()
	if err != nil {
		return nil, err
	}
	arrays["expected.loss"] = Scalar(v)
	// A token outside the selection passes unchanged, and a padded one
	// counts in no loss, but for these two.
	gx, err := inputGradient(s, &dr, d, &st, loss, !d.scaleSkipped && !d.auxOverPadding)
	if err != nil {
		return nil, fmt.Errorf("gradient of input.x: %w", err)
	}
	arrays["grad.input.x"] = Float(gx, s.batch, s.seqLen, s.cfg.Block.D)
	for _, t := range dr.p.Tensors("") {
		g, err := gradient(loss, t.Data, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gradient of param.%s: %w", t.Name, err)
		}
		arrays["grad.param."+t.Name] = g
	}
	return arrays, nil
}

// inputGradient is grad.input.x of a layer case under deviation d, whose
// routing st is decided, by finite differences of loss, token by token.
// When skipUnseen is set, a token the block does not see takes a shorter
// way, if the configuration allows it: under gather compute without
// MLP-only routing, a token outside the selection enters the loss only as
// its own output, out_i = x_i (no emulated deviation touches such a token,
// but for gather_first_k's positions 0..k−1, which take the long way),
// and through its router and predictor logits in the auxiliary loss; and
// when the load-balancing term, the only one that reads the selection, has
// weight 0, ref computes that auxiliary loss without running the block if
// handed an empty selection. Its gradient is then u_i, the upstream
// gradient, plus the finite difference of the auxiliary loss alone: the
// same derivative without recomputing, twice per coordinate, a block its
// perturbation cannot reach (most of layer-capacity-floor's cost, where 71
// of every 100 tokens are outside the selection).
func inputGradient(s layerSpec, dr *layerDraw, d *layerDeviation, st *layerState, loss func() (float64, error), skipUnseen bool) ([]float64, error) {
	cfg := s.cfg
	short := skipUnseen && cfg.Compute == spec.ComputeGather && !cfg.MLPOnly && cfg.LoadBalanceWeight == 0
	aux := func() (float64, error) {
		fz := st.fz
		fz.Selection = ref.Selection{S: s.seqLen, Rows: make([][]int, s.batch)}
		if d.feed == feedLiveInput {
			fz.PredictorInput = dr.in.X
		}
		res, err := ref.LayerForwardFrozen(cfg, dr.p, dr.in, fz)
		if err != nil {
			return 0, err
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
	gx := make([]float64, 0, s.batch*s.seqLen*cfg.Block.D)
	for b, x := range dr.in.X {
		for i := 0; i < s.seqLen; i++ {
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
			for j, u := range dr.u[b].RawRowView(i) {
				g[j] += u
			}
			gx = append(gx, g...)
		}
	}
	return gx, nil
}

// selectedLike is a selection as a B×k_max array padded with −1 to the width
// of the case's array name (a deviant selection may be narrower).
func selectedLike(c *Case, name string, sel ref.Selection) (*Array, error) {
	want, err := c.array(name)
	if err != nil {
		return nil, err
	}
	if len(want.Shape) != 2 {
		return nil, fmt.Errorf("array %q has shape %v, want B×k", name, want.Shape)
	}
	width := want.Shape[1]
	v := make([]int64, 0, len(sel.Rows)*width)
	for b, row := range sel.Rows {
		if len(row) > width {
			return nil, fmt.Errorf("row %d selects %d tokens, more than the %d columns of %q", b, len(row), width, name)
		}
		for j := 0; j < width; j++ {
			p := int64(-1)
			if j < len(row) {
				p = int64(row[j])
			}
			v = append(v, p)
		}
	}
	return Int(v, len(sel.Rows), width), nil
}
