package mod

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/spec"
)

// Layer is one routed Mixture-of-Depths layer (docs/spec.md §2 to §9): a
// router, a capacity rule, the pre-norm block f, the output weighting, and
// optionally the auxiliary predictor.
//
// A Layer keeps work buffers between calls and is not safe for concurrent
// use, as an autograd.Tape is not.
type Layer struct {
	// Router is the d×1 router weight w (linear and linear_bias routers;
	// nil otherwise) and RouterBias the 1×1 bias b (linear_bias only).
	Router, RouterBias *autograd.Tensor
	// Predictor is the auxiliary predictor of docs/spec.md §8, nil unless
	// the configuration uses one (Aux = predictor or Causal = predictor).
	Predictor *Predictor

	cfg   spec.Config // every routing choice, checked by NewLayer
	blk   *block
	order []int // selection work buffer
}

// Predictor is the auxiliary MLP of docs/spec.md §8 that predicts from
// sg(x_i) whether token i is routed: q = SiLU(x·W1 + b1)·W2 + b2.
type Predictor struct {
	// In is Linear(d, h) with bias, Out is Linear(h, 1) with bias.
	In, Out *nn.Linear
}

// Logits returns q for every row of x; x should be a stop-gradient copy of
// the layer input, so that the predictor's loss trains only the predictor.
//
//	x: [N, d] → [N, h] → [N, 1]
func (p *Predictor) Logits(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	return p.Out.Forward(tp, tp.SiLU(p.In.Forward(tp, x)))
}

// NewLayer returns the routed layer described by cfg with parameters drawn
// from rng: the block as nn.NewBlock draws it, then the router weight from
// N(0, nn.InitStd²) with a zero bias, then the predictor's Linear maps as
// nn.NewLinear draws them. A nil rng draws nothing: the weights are zeros,
// the shapes to load values into. An invalid cfg is an error naming the
// field.
func NewLayer(cfg spec.Config, rng *rand.Rand) (*Layer, error) {
	l, err := newLayer(cfg, rng)
	if err != nil {
		return nil, fmt.Errorf("mod: %w", err)
	}
	return l, nil
}

// newLayer is NewLayer with errors not prefixed by the package name.
func newLayer(cfg spec.Config, rng *rand.Rand) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	blk, err := newBlock(cfg.Block, rng)
	if err != nil {
		return nil, err
	}
	l := &Layer{cfg: cfg, blk: blk}
	d := cfg.Block.D
	if cfg.Router == spec.RouterLinear || cfg.Router == spec.RouterLinearBias {
		w := make([]float32, d)
		for i := range w {
			if rng != nil {
				w[i] = float32(rng.NormFloat64() * nn.InitStd)
			}
		}
		l.Router = autograd.NewParam(d, 1, w)
	}
	if cfg.Router == spec.RouterLinearBias {
		l.RouterBias = autograd.NewParam(1, 1, nil)
	}
	if cfg.HasPredictor() {
		h := cfg.PredictorWidth()
		l.Predictor = &Predictor{In: nn.NewLinear(d, h, true, rng), Out: nn.NewLinear(h, 1, true, rng)}
	}
	return l, nil
}

// Config returns the layer's configuration.
func (l *Layer) Config() spec.Config { return l.cfg }

// SetCapacity changes the capacity rule, for instance each training step of
// a capacity annealing schedule (see AnnealedRatio), or returns an error
// naming the field that cannot work; the layer is then unchanged.
func (l *Layer) SetCapacity(c spec.Capacity) error {
	cfg := l.cfg
	cfg.Capacity = c
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("mod: %w", err)
	}
	l.cfg = cfg
	return nil
}

// Block returns the layer's transformer block f.
func (l *Layer) Block() *nn.Block { return l.blk.Block }

// LayerInputs are the data a routed layer reads.
type LayerInputs struct {
	// X is the residual stream entering the layer, (B·S)×d, sequence after
	// sequence.
	X *autograd.Tensor
	// Batch is B and SeqLen is S.
	Batch, SeqLen int
	// Valid holds V_b, the valid (unpadded) length of each sequence; nil
	// means every position is valid.
	Valid []int
	// Noise holds the B·S N(0,1) router weights of the random router; nil
	// for the other routers.
	Noise []float32
	// Jitter holds the B·S N(0,1) draws eps of the jitter r + s·eps; nil
	// when Config.Jitter is 0.
	Jitter []float32
}

// LayerResult is what a routed layer's forward computes. It lives on the
// tape, as everything in it does (the tensors, the slices, Frozen): valid
// until the tape's Reset, after which the tape reuses its memory.
type LayerResult struct {
	// Out is the layer output, (B·S)×d: x_i + g_i·f_i for routed tokens (or
	// x_i + w_i·f_i under dense compute), x_i for the others.
	Out *autograd.Tensor
	// AuxLoss is this layer's share of the total loss, AuxWeight times the
	// router_bce or predictor loss plus LoadBalanceWeight times the
	// load-balancing loss, as a 1×1 tensor; nil when both weights are 0.
	AuxLoss *autograd.Tensor
	// RouterLogits are the router weights r after noise and jitter, B·S
	// values, 0 at padded positions.
	RouterLogits []float32
	// Selected lists, per sequence, the routed positions in ascending order.
	Selected [][]int
	// Capacity is k_b per sequence: the top-k capacity, or the number of
	// tokens routed under causal routing.
	Capacity []int
	// TopK holds each row's top-k choice under the capacity, ascending. It
	// equals Selected except under causal routing, where tokens are routed
	// by r > 0 or q > 0 while the auxiliary objectives still learn to predict
	// the top-k choice (docs/spec.md §8 and §9).
	TopK [][]int
	// Targets are t_i = 1 for the tokens of TopK, 0 otherwise (B·S).
	Targets []float32
	// Weights are g (docs/spec.md §6) at every valid position: r, σ(r) or
	// 1, and for softmax weighting the softmax over the routed tokens (0 for
	// the others). 0 at padded positions.
	Weights []float32
	// Multipliers are the factors applied to f: g for routed tokens under
	// gather compute, the straight-through weight w under dense compute
	// (equal to m·g in value), 0 elsewhere.
	Multipliers []float32
	// PredictorLogits are q (B·S, 0 at padded positions); nil without a
	// predictor. PredictorAccuracy is the fraction of valid tokens with
	// 1[q > 0] = t (0 without a predictor).
	PredictorLogits   []float32
	PredictorAccuracy float64
	// RouterBCE, PredictorBCE and LoadBalance are the auxiliary losses of
	// docs/spec.md §8 (PredictorBCE is 0 without a predictor), and Aux the
	// value of AuxLoss (0 when it is nil).
	RouterBCE, PredictorBCE, LoadBalance, Aux float64
	// Routed and Skipped count the valid tokens that went through the block
	// and around it; ComputeFraction is Routed/(Routed+Skipped).
	Routed, Skipped int
	ComputeFraction float64
	// FLOPs is the layer's forward cost against its dense twin.
	FLOPs LayerFLOPs
	// Frozen is the decision and the constants to replay with
	// ForwardFrozen (its Selected and TopK are the fields above).
	Frozen Frozen
}

// check validates the inputs against the configuration.
func (l *Layer) check(in LayerInputs) (batch, error) {
	bt, err := newBatch(in.Batch, in.SeqLen, in.Valid)
	if err != nil {
		return bt, err
	}
	n := in.Batch * in.SeqLen
	if d := l.cfg.Block.D; in.X == nil || in.X.Rows != n || in.X.Cols != d {
		shape := "nil"
		if in.X != nil {
			shape = fmt.Sprintf("%dx%d", in.X.Rows, in.X.Cols)
		}
		return bt, fmt.Errorf("X is %s, want (B·S)×d = %dx%d", shape, n, d)
	}
	if err := checkField("Noise", in.Noise, l.cfg.Router == spec.RouterRandom, "Router = random", n); err != nil {
		return bt, err
	}
	return bt, checkField("Jitter", in.Jitter, l.cfg.Jitter > 0, "Jitter > 0", n)
}

// Forward runs the layer on a batch (docs/spec.md §2 to §9). An input
// that does not fit, a capacity rule that cannot hold for these lengths, or
// a NaN router weight (naming its row and position) is an error.
//
//	in.X: [B·S, d] → Out: [B·S, d]
func (l *Layer) Forward(tp *autograd.Tape, in LayerInputs) (*LayerResult, error) {
	res, err := l.forward(tp, in)
	if err != nil {
		return nil, fmt.Errorf("mod: layer: %w", err)
	}
	return res, nil
}

// forward is Forward with errors not prefixed by the package name.
func (l *Layer) forward(tp *autograd.Tape, in LayerInputs) (*LayerResult, error) {
	bt, err := l.check(in)
	if err != nil {
		return nil, err
	}
	r := l.routerWeights(tp, in, bt)
	var q *autograd.Tensor
	if l.Predictor != nil {
		q = l.Predictor.Logits(tp, tp.StopGradient(in.X))
	}
	res, err := l.decide(tp, bt, r, q)
	if err != nil {
		return nil, err
	}
	res.Frozen = Frozen{Selected: res.Selected, TopK: res.TopK}
	if q != nil {
		res.Frozen.PredictorInput = autograd.Make[float32](tp, len(in.X.Data))
		copy(res.Frozen.PredictorInput, in.X.Data)
	}
	l.apply(tp, in, bt, r, q, res, nil)
	return res, nil
}

// Frozen is a routing decision and the stop-gradient constants that go with
// it, ref.Frozen's counterpart. A forward given a Frozen (ForwardFrozen) is
// a smooth function of the parameters and of X: no change of X changes
// which tokens are routed, so its finite differences are the gradients of
// docs/spec.md §12, and properties that hold only with the decision fixed
// (docs/fuzzing.md, 14 and 16) can be checked. A LayerResult's Frozen
// lives on its tape like the rest of the result: to replay it on the same
// tape after a Reset, copy its slices first.
type Frozen struct {
	// Selected lists, per sequence, the routed positions in ascending order.
	Selected [][]int
	// TopK holds each sequence's top-k choice, whose indicator is the
	// target t of docs/spec.md §8; it equals Selected except under causal
	// routing (§9).
	TopK [][]int
	// STEOffset is sg(m·g − g) of docs/spec.md §7 at every flat row (B·S
	// values, 0 at padded positions) under dense compute; nil otherwise.
	STEOffset []float32
	// PredictorInput is sg(x), the predictor's input: a copy of the
	// (B·S)×d layer input X, row-major; nil without a predictor.
	PredictorInput []float32
}

// ForwardFrozen runs the layer with the routing decision and the
// stop-gradient constants taken from fz instead of computed (docs/spec.md
// §5 to §8), like ref.LayerForwardFrozen: the router weights r, and g from
// them, are computed from in; the selection, the targets, the
// straight-through offsets (dense compute) and the predictor's input come
// from fz. Replaying a result's own Frozen on the same inputs gives that
// result bit for bit. A decision that does not fit the inputs (a row count,
// a position outside the valid ones, unsorted positions, a missing or
// misshapen constant) is an error naming it.
//
//	in.X: [B·S, d] → Out: [B·S, d]
func (l *Layer) ForwardFrozen(tp *autograd.Tape, in LayerInputs, fz Frozen) (*LayerResult, error) {
	bt, err := l.check(in)
	if err == nil {
		err = l.checkFrozen(bt, fz)
	}
	if err != nil {
		return nil, fmt.Errorf("mod: layer (frozen): %w", err)
	}
	r := l.routerWeights(tp, in, bt)
	var q *autograd.Tensor
	if l.Predictor != nil {
		q = l.Predictor.Logits(tp, autograd.New(in.X.Rows, in.X.Cols, fz.PredictorInput))
	}
	res := &autograd.Make[LayerResult](tp, 1)[0]
	res.Selected, res.TopK, res.Capacity, res.Frozen = fz.Selected, fz.TopK, autograd.Make[int](tp, bt.rows), fz
	for b := range bt.rows {
		res.Capacity[b] = len(fz.Selected[b])
		res.Routed += len(fz.Selected[b])
		res.Skipped += bt.validLen(b) - len(fz.Selected[b])
	}
	l.apply(tp, in, bt, r, q, res, fz.STEOffset)
	return res, nil
}

// checkFrozen checks that fz is a decision for the batch bt.
func (l *Layer) checkFrozen(bt batch, fz Frozen) error {
	for _, f := range []struct {
		name string
		pos  [][]int
	}{{"Selected", fz.Selected}, {"TopK", fz.TopK}} {
		if len(f.pos) != bt.rows {
			return fmt.Errorf("frozen %s has %d rows, want B = %d", f.name, len(f.pos), bt.rows)
		}
		for b, row := range f.pos {
			v := bt.validLen(b)
			for j, i := range row {
				if i < 0 || i >= v || (j > 0 && i <= row[j-1]) {
					return fmt.Errorf("frozen %s row %d: positions %v are not ascending valid positions in [0, V_b = %d)", f.name, b, row, v)
				}
			}
		}
	}
	n := bt.rows * bt.s
	if err := checkField("frozen STEOffset", fz.STEOffset, l.cfg.Compute == spec.ComputeDense, "dense compute", n); err != nil {
		return err
	}
	if l.Predictor == nil {
		if fz.PredictorInput != nil {
			return fmt.Errorf("frozen PredictorInput is given but the layer has no predictor; pass nil")
		}
	} else if want := n * l.cfg.Block.D; len(fz.PredictorInput) != want {
		return fmt.Errorf("frozen PredictorInput has %d values, want (B·S)·d = %d", len(fz.PredictorInput), want)
	}
	return nil
}

// routerWeights returns r over every row of the batch, 0 at padded rows.
//
//	in.X: [B·S, d] → [B·S, 1]
func (l *Layer) routerWeights(tp *autograd.Tape, in LayerInputs, bt batch) *autograd.Tensor {
	x := in.X
	vidx := bt.rowsOf(tp, bt.validPositions(tp))
	switch {
	case len(vidx) == 0:
		return tp.Zeros(x.Rows, 1)
	case bt.padded():
		r := l.routerLogits(tp, tp.GatherRows(x, vidx), in, vidx)
		return tp.ScatterAddRows(tp.Zeros(x.Rows, 1), r, vidx)
	}
	return l.routerLogits(tp, x, in, vidx)
}

// apply computes, for the decision in res (Selected, TopK, Capacity and the
// counts), the output, the weights and the losses from the router weights r
// and the predictor logits q. ste holds the straight-through offsets
// sg(m·g − g) of dense compute (B·S values); nil computes them from g and
// records them in res.Frozen.
func (l *Layer) apply(tp *autograd.Tape, in LayerInputs, bt batch, r, q *autograd.Tensor, res *LayerResult, ste []float32) {
	cfg := l.cfg
	x := in.X
	padded := bt.padded()
	vpos := bt.validPositions(tp)
	vidx := bt.rowsOf(tp, vpos)
	sel := res.Selected
	selIdx := bt.rowsOf(tp, sel)
	res.Targets = autograd.Make[float32](tp, x.Rows)
	for b, p := range res.TopK {
		for _, i := range p {
			res.Targets[b*bt.s+i] = 1
		}
	}

	// The weight g and the multiplier of f at the rows where f is computed.
	g := l.weights(tp, r, sel, selIdx)
	cidx, cpos := selIdx, sel
	var mult *autograd.Tensor
	if cfg.Compute == spec.ComputeDense {
		cidx, cpos = vidx, vpos
		gv := g
		if cfg.Weighting == spec.WeightSoftmax {
			gv = tp.ScatterAddRows(tp.Zeros(x.Rows, 1), g, selIdx)
		}
		if padded {
			gv = tp.GatherRows(gv, vidx)
		}
		var off *autograd.Tensor
		if ste == nil {
			// Dense compute is top-k only (causal routing rejects it), so
			// the selection mask is the targets.
			m := tp.Zeros(len(vidx), 1)
			for j, k := range vidx {
				m.Data[j] = res.Targets[k]
			}
			off = steOffset(tp, gv, m)
			res.Frozen.STEOffset = autograd.Make[float32](tp, x.Rows)
			for j, k := range vidx {
				res.Frozen.STEOffset[k] = off.Data[j]
			}
		} else {
			off = pick(tp, ste, vidx, 1)
		}
		mult = tp.Add(gv, off)
	} else {
		mult = g
		if cfg.Weighting != spec.WeightSoftmax {
			mult = tp.GatherRows(g, selIdx)
		}
	}
	res.Out = l.addUpdate(tp, x, l.residualBase(tp, x, tokens{vidx, vpos}), tokens{cidx, cpos}, mult)

	res.RouterLogits = autograd.Make[float32](tp, len(r.Data))
	copy(res.RouterLogits, r.Data)
	if cfg.Weighting == spec.WeightSoftmax {
		res.Weights = perToken(tp, len(r.Data), g.Data, selIdx) // g is over the selected tokens
	} else {
		res.Weights = atValid(tp, bt, g.Data)
	}
	res.Multipliers = perToken(tp, len(r.Data), mult.Data, cidx)
	if q != nil {
		res.PredictorLogits = atValid(tp, bt, q.Data)
	}
	l.losses(tp, res, bt, padded, r, q)
	res.FLOPs = layerFLOPs(cfg, bt.lengths(tp), res.Capacity)
	if n := res.Routed + res.Skipped; n > 0 {
		res.ComputeFraction = float64(res.Routed) / float64(n)
	}
}

// steOffset is the constant of the straight-through weight of docs/spec.md
// §7, w = g + sg(m·g − g): the offset sg(m·g − g). With it w's value is m·g
// exactly (g + (g − g) = g and g + (0 − g) = 0 in floating point) and its
// derivative with respect to g is 1 for every token, selected (m = 1) or
// not.
//
//	g, m: [n, 1] → [n, 1]
func steOffset(tp *autograd.Tape, g, m *autograd.Tensor) *autograd.Tensor {
	return tp.StopGradient(tp.Sub(tp.Mul(g, m), g))
}

// decide makes the routing decision of docs/spec.md §4 and §9 from the
// router weights r (or the predictor logits q, for Causal = predictor): the
// selected positions of every sequence, its capacity and the counts of
// routed and skipped tokens.
func (l *Layer) decide(tp *autograd.Tape, bt batch, r, q *autograd.Tensor) (*LayerResult, error) {
	res := &autograd.Make[LayerResult](tp, 1)[0]
	res.Selected, res.TopK, res.Capacity = autograd.Make[[]int](tp, bt.rows), autograd.Make[[]int](tp, bt.rows), autograd.Make[int](tp, bt.rows)
	for b := range bt.rows {
		v := bt.validLen(b)
		row := r.Data[b*bt.s : b*bt.s+v]
		k, err := Capacity(l.cfg.Capacity, v, bt.s)
		if err == nil {
			res.TopK[b], l.order, err = selectTopK(autograd.Make[int](tp, k)[:0], l.order, row, k)
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", b, err)
		}
		switch l.cfg.Causal {
		case spec.CausalRouter:
			res.Selected[b], err = selectCausal(autograd.Make[int](tp, positives(row))[:0], row)
		case spec.CausalPredictor:
			qr := q.Data[b*bt.s : b*bt.s+v]
			res.Selected[b], err = selectCausal(autograd.Make[int](tp, positives(qr))[:0], qr)
		default:
			res.Selected[b] = res.TopK[b]
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", b, err)
		}
		res.Capacity[b] = len(res.Selected[b])
		res.Routed += len(res.Selected[b])
		res.Skipped += v - len(res.Selected[b])
	}
	return res, nil
}

// tokens is a set of tokens of a batch: their rows in the (B·S)×d matrix,
// and their positions in each sequence.
type tokens struct {
	rows []int
	pos  [][]int
}

// residualBase is the residual stream a routed token's update is added to:
// x, or for MLP-only routing x + Attn(N1(x)) with attention over the valid
// tokens.
//
//	x: [B·S, d] → [B·S, d]
func (l *Layer) residualBase(tp *autograd.Tape, x *autograd.Tensor, valid tokens) *autograd.Tensor {
	if !l.cfg.MLPOnly || len(valid.rows) == 0 {
		return x
	}
	if len(valid.rows) < x.Rows { // padded
		return tp.ScatterAddRows(x, l.blk.attnUpdate(tp, tp.GatherRows(x, valid.rows), valid.pos), valid.rows)
	}
	return tp.Add(x, l.blk.attnUpdate(tp, x, valid.pos))
}

// addUpdate is Eq. 1: out = base + mult·f at the computed tokens, base
// elsewhere, where f is the block's update of the computed tokens as
// sequences (MLP-only: MLP(N2(base)) of each).
//
//	x, base: [B·S, d], mult: [len(computed.rows), 1] → [B·S, d]
func (l *Layer) addUpdate(tp *autograd.Tape, x, base *autograd.Tensor, computed tokens, mult *autograd.Tensor) *autograd.Tensor {
	if len(computed.rows) == 0 {
		return base
	}
	// Every row, in order: no gather or scatter needed.
	all := len(computed.rows) == x.Rows
	xs := base
	if !l.cfg.MLPOnly {
		xs = x
	}
	if !all {
		xs = tp.GatherRows(xs, computed.rows)
	}
	var f *autograd.Tensor
	if l.cfg.MLPOnly {
		f = l.blk.MLPUpdate(tp, xs)
	} else {
		f = l.blk.update(tp, xs, computed.pos)
	}
	upd := tp.Mul(f, mult)
	if all {
		return tp.Add(base, upd)
	}
	return tp.ScatterAddRows(base, upd, computed.rows)
}

// positives counts the scores above 0, the length of selectCausal's list.
func positives(score []float32) int {
	n := 0
	for _, v := range score {
		if v > 0 {
			n++
		}
	}
	return n
}

// perToken returns the n per-token values of v, whose entry j belongs to
// token rows[j], on the tape; the other tokens get 0.
func perToken(tp *autograd.Tape, n int, v []float32, rows []int) []float32 {
	out := autograd.Make[float32](tp, n)
	for j, k := range rows {
		out[k] = v[j]
	}
	return out
}

// atValid returns a copy of the per-token values v, on the tape, with
// padded tokens set to 0.
func atValid(tp *autograd.Tape, bt batch, v []float32) []float32 {
	out := autograd.Make[float32](tp, len(v))
	for k := range v {
		if bt.isValid(k) {
			out[k] = v[k]
		}
	}
	return out
}
