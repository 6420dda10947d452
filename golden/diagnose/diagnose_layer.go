package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// The emulated routed layer: a deviation's routing decision (decide), its
// evaluation on ref's pieces (run) and the block run again on the tokens it
// gathers (regather). The deviations themselves are defined in
// deviations_layer.go.

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
	// rowSoftmax replaces the output weight g of every valid token by the
	// softmax of the router weights over the row's valid tokens.
	rowSoftmax bool
	// swapQK exchanges every block's queries and keys (swapQKArrays).
	swapQK bool
	// scaled multiplies every valid token's router weight by α (alpha):
	// weight_scaled. scale is α, fitted or given; 0 for defaultScale.
	scaled bool
	scale  float64
	// routerNormed computes the router weights from N1(x) instead of x
	// (router_normed_input): decide routes by them, run reports and
	// applies them (normedRouter).
	routerNormed bool
	// decodeFault is, in a decode case, the decode_mismatch variant
	// combined with the deviation (combineDecode); the zero value decodes
	// as ref does.
	decodeFault decodeVariant
	feed        predictorFeed
	// written is what the candidate wrote of each routed layer, by the
	// prefix of its expected arrays: the orders unsorted_indices and
	// gather_first_k take from it. nil without a candidate.
	written map[string]written
	// output replaces the layer's output (and the multipliers it reports)
	// from the live ref result; nil keeps ref's.
	output func(l *layerRun)
	// forward, when set, is ref's forward of the layer case at its own
	// inputs, computed once for every deviation emulated on it (decide
	// reads it and writes nothing to it); nil, decide computes it.
	forward *sharedForward
	// caught, when set, asks for the gradients only where the forward
	// arrays do not already fail the case's comparison (MeasuredCatches),
	// or with caught.cand, where the candidate does not already depart
	// from them (the combination search's refusal, judgeCombinations):
	// caught.byForward records that they did, and the emulation then
	// holds the forward arrays alone.
	caught *forwardCatch
}

// forwardCatch is whether a deviation's forward arrays alone fail the
// case's comparison, or, with cand, whether the candidate cand departs
// from them.
type forwardCatch struct {
	byForward bool
	cand      map[string]*format.Array
	// c is the layer case cand is judged on, when cand is set.
	c *format.Case
}

// fails is caught.byForward of the forward arrays of case c (expected
// names).
func (f *forwardCatch) fails(c *format.Case, arrays map[string]*format.Array) (bool, error) {
	if f.cand == nil {
		return failsOn(c, arrays)
	}
	return departsOn(c, f.cand, arrays)
}

// sharedForward is ref.LayerForward of one layer case, computed by the
// first deviation that needs it, ref.LayerForwardKept at its decision
// (kept), computed by the first deviation that keeps ref's decision, and
// the case's parameters and inputs (draw).
type sharedForward struct {
	once sync.Once
	res  *ref.LayerResult
	err  error

	// draw is the case's parameters and inputs (layerDraw), read by every
	// emulation that differentiates by a backward pass, none writing them.
	drawOnce sync.Once
	draw     oracle.LayerDraw
	drawErr  error

	keptOnce sync.Once
	kept     *ref.LayerResult
	keptErr  error

	// passes are the blocks run again on gathered tokens (regatherPasses),
	// by row, tokens and placement (passKey), while their values fit in
	// maxSharedPassBytes (passBytes counts them), once sharePasses is
	// set: the combinations of the search gather the same tokens the same
	// way (a combination with an output formula gathers as its other
	// deviations do), where the single deviations each gather their own.
	sharePasses bool
	passMu      sync.Mutex
	passes      map[string]*sharedPass
	passBytes   int
}

// maxSharedPassBytes bounds the memory of the block passes a layer case's
// emulations share (sharedForward.passes): at d = 512 (the production
// example) about five of them, at Llama-3-8B's width about one.
const maxSharedPassBytes = 256 << 20

// sharedPass is one block pass on gathered tokens, made once.
type sharedPass struct {
	once sync.Once
	bp   *ref.BlockPass
	a, m *mat.Dense // its attention and MLP updates, read only
	err  error
}

// blockPass is ref.NewBlockPass of row b's tokens order at placement at,
// with its attention and MLP updates, shared through d.forward where the
// memory bound allows: the pass, a and m are read only (BlockPass.Backward
// writes only into the gradients it is given).
func (d *layerDeviation) blockPass(c spec.BlockConfig, p *ref.BlockParams, x *mat.Dense, b int, order []int, at ref.BlockAt) (*ref.BlockPass, *mat.Dense, *mat.Dense, error) {
	build := func() (*ref.BlockPass, *mat.Dense, *mat.Dense, error) {
		bp, err := ref.NewBlockPass(c, p, ref.GatherRows(x, order), at)
		if err != nil {
			return nil, nil, nil, err
		}
		return bp, bp.Attention(), bp.MLP(), nil
	}
	f := d.forward
	if f == nil || !f.sharePasses {
		return build()
	}
	key := passKey(b, order, at)
	f.passMu.Lock()
	sp, ok := f.passes[key]
	if !ok {
		size := 8 * len(order) * (12*c.D + 3*c.DFF)
		if f.passBytes+size > maxSharedPassBytes {
			f.passMu.Unlock()
			return build()
		}
		if f.passes == nil {
			f.passes = make(map[string]*sharedPass)
		}
		sp = new(sharedPass)
		f.passes[key] = sp
		f.passBytes += size
	}
	f.passMu.Unlock()
	sp.once.Do(func() { sp.bp, sp.a, sp.m, sp.err = build() })
	return sp.bp, sp.a, sp.m, sp.err
}

// passKey names a block pass of row b: its tokens in order and their
// placement.
func passKey(b int, order []int, at ref.BlockAt) string {
	k := fmt.Appendf(nil, "%d %t|", b, at.Bidirectional)
	for _, l := range [][]int{order, at.RoPE, at.Window} {
		for _, v := range l {
			k = strconv.AppendInt(k, int64(v), 10)
			k = append(k, ',')
		}
		k = append(k, '|')
	}
	return string(k)
}

// layerDraw is oracle.LayerDrawViewOf(c, s), shared through d.forward
// when set: the emulations of a layer case read the same parameters and
// inputs and write none of them.
func (d *layerDeviation) layerDraw(c *format.Case, s oracle.LayerSpec) (oracle.LayerDraw, error) {
	f := d.forward
	if f == nil {
		return oracle.LayerDrawViewOf(c, s)
	}
	f.drawOnce.Do(func() { f.draw, f.drawErr = oracle.LayerDrawViewOf(c, s) })
	return f.draw, f.drawErr
}

// layerForward is ref.LayerForward(cfg, p, in), shared through d.forward
// when set: every deviation of a layer case starts from the same
// parameters and inputs.
func (d *layerDeviation) layerForward(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) (*ref.LayerResult, error) {
	if d.forward == nil {
		return ref.LayerForward(cfg, p, in)
	}
	d.forward.once.Do(func() { d.forward.res, d.forward.err = ref.LayerForward(cfg, p, in) })
	return d.forward.res, d.forward.err
}

// keptForward is ref.LayerForwardKept(cfg, p, in, fz): decide's where it
// kept it (st.kept), or shared through d.forward where fz is ref's own
// decision of the case with the predictor's input as ref freezes it
// (st.refDecision, d.feed): every
// deviation that keeps them starts from the same kept forward, which pass
// reads and does not write (it replaces the result's fields in its own
// copy of the result, never their contents).
func (d *layerDeviation) keptForward(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, fz ref.Frozen, st *layerState) (*ref.LayerResult, error) {
	if st.kept != nil { // decide's, at fz
		res := *st.kept
		return &res, nil
	}
	if d.forward == nil || !st.refDecision || d.feed != feedFrozenInput {
		return ref.LayerForwardKept(cfg, p, in, fz)
	}
	f := d.forward
	f.keptOnce.Do(func() { f.kept, f.keptErr = ref.LayerForwardKept(cfg, p, in, f.res.Frozen) })
	if f.keptErr != nil {
		return nil, f.keptErr
	}
	res := *f.kept
	return &res, nil
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
	// refDecision reports that the decision is ref's own, made by the
	// shared forward (layerDeviation.forward), unchanged.
	refDecision bool
	// keep asks decide to keep, for pass's backward, the forward it runs
	// at a decision that is not ref's (kept), where the predictor reads
	// its frozen input, so that pass does not run it again.
	keep bool
	kept *ref.LayerResult
	// refused reports that decide found the candidate departing from the
	// deviant selection (departsAtSelection): the layer was not run.
	refused bool
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
	if d.routerNormed {
		if err := normedRouter(l); err != nil {
			return nil, err
		}
	}
	if d.scaled {
		scaleWeight(l, d.alpha())
	}
	gate := d.gate()
	if gate != nil && d.weightMLPOnly {
		gateMultipliers(l, gate)
	}
	if d.gathered() {
		d.regather(l)
	}
	if gate != nil {
		setGate(l, gate)
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
	res, err := d.layerForward(cfg, p, in)
	if err != nil {
		return err
	}
	st.fz = res.Frozen
	ref0 := cloneDecision(res.Frozen)
	if d.routerNormed {
		r, err := normedRouterWeights(cfg, p, in)
		if err != nil {
			return err
		}
		if st.fz, err = normedDecision(cfg, in, st.fz, r); err != nil {
			return err
		}
	}
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
		if st.refused, err = d.departsAtSelection(st); err != nil || st.refused {
			return err
		}
		// The decision changed: the layer at it. (Otherwise it is ref's,
		// and LayerForward's result is the frozen forward's, bit for bit.)
		// LayerForwardKept's result is LayerForwardFrozen's.
		if st.keep && d.feed == feedFrozenInput {
			res, err = ref.LayerForwardKept(cfg, p, in, st.fz)
			st.kept = res
		} else {
			res, err = ref.LayerForwardFrozen(cfg, p, in, st.fz)
		}
		if err != nil {
			return err
		}
	} else {
		st.refDecision = d.forward != nil
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

// departsAtSelection reports, for pass with the candidate's refusal
// (d.caught.cand), whether the candidate's selected positions depart from
// the decision st made, before the layer is run at it: then its forward
// arrays do too (caught.byForward is set). Under scoreOrder the positions
// are written in the order decide finds later, and it reports false.
func (d *layerDeviation) departsAtSelection(st *layerState) (bool, error) {
	f := d.caught
	if !st.keep || f == nil || f.cand == nil || d.scoreOrder {
		return false, nil
	}
	sel, err := selectedLike(f.c, "expected.selected", st.fz.Selection)
	if err != nil {
		return false, err
	}
	f.byForward, err = departsOn(f.c, f.cand, map[string]*format.Array{"expected.selected": sel})
	return f.byForward, err
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
		v := row[:oracle.ValidLen(valid, b, len(row))]
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

// sameShape returns zero matrices shaped as the batch ms, in one slice
// (ref.NewBatch), which oracle.BatchArray then shares rather than copies.
func sameShape(ms []*mat.Dense) []*mat.Dense {
	r, c := ms[0].Dims()
	return ref.NewBatch(len(ms), r, c)
}

// eachRow returns new outputs whose row i of batch row b is
// f(b, i, base row, out row, update row, multiplier), out and update as
// the block ran (regather may have changed ref's).
func (l *layerRun) eachRow(f func(b, i int, x, out, upd []float64, mult float64) []float64) []*mat.Dense {
	base := l.base()
	res := sameShape(l.out)
	for b, o := range l.out {
		s, _ := o.Dims()
		for i := 0; i < s; i++ {
			res[b].SetRow(i, f(b, i, base[b].RawRowView(i), o.RawRowView(i), l.upd[b].RawRowView(i), l.mult[b][i]))
		}
	}
	return res
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
	l.out, l.upd = sameShape(l.in.X), make([]*mat.Dense, len(l.in.X))
	for b, x := range l.in.X {
		o := l.out[b]
		o.Copy(x)
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
