package mod

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/ref"
)

// Layer is one routed Mixture-of-Depths layer (SPEC.md sections 2 to 9): a
// router, a capacity rule, the pre-norm block f, the output weighting, and
// optionally the auxiliary predictor.
//
// A Layer keeps work buffers between calls and is not safe for concurrent
// use, as an autograd.Tape is not.
type Layer struct {
	// Router is the d×1 router weight w (linear and linear_bias routers;
	// nil otherwise) and RouterBias the 1×1 bias b (linear_bias only).
	Router, RouterBias *autograd.Tensor
	// Predictor is the auxiliary predictor of SPEC.md section 8, nil unless
	// the configuration uses one (Aux = predictor or Causal = predictor).
	Predictor *Predictor

	cfg   ref.Config // every routing choice, checked by NewLayer
	blk   *block
	order []int // selection work buffer
}

// Predictor is the auxiliary MLP of SPEC.md section 8 that predicts from
// sg(x_i) whether token i is routed: q = SiLU(x·W1 + b1)·W2 + b2.
type Predictor struct {
	// In is Linear(d, h) with bias, Out is Linear(h, 1) with bias.
	In, Out *nn.Linear
}

// Logits returns q for every row of x; x should be a stop-gradient copy of
// the layer input, so that the predictor's loss trains only the predictor.
func (p *Predictor) Logits(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	return p.Out.Forward(tp, tp.SiLU(p.In.Forward(tp, x)))
}

// NewLayer returns the routed layer described by cfg with parameters drawn
// from rng: the block as nn.NewBlock draws it, then the router weight from
// N(0, nn.InitStd²) with a zero bias, then the predictor's Linear maps as
// nn.NewLinear draws them. An invalid cfg is an error naming the field.
func NewLayer(cfg ref.Config, rng *rand.Rand) (*Layer, error) {
	l, err := newLayer(cfg, rng)
	if err != nil {
		return nil, fmt.Errorf("mod: %w", err)
	}
	return l, nil
}

// newLayer is NewLayer with errors not prefixed by the package name.
func newLayer(cfg ref.Config, rng *rand.Rand) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	blk, err := newBlock(cfg.Block, rng)
	if err != nil {
		return nil, err
	}
	l := &Layer{cfg: cfg, blk: blk}
	d := cfg.Block.D
	if cfg.Router == ref.RouterLinear || cfg.Router == ref.RouterLinearBias {
		w := make([]float32, d)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * nn.InitStd)
		}
		l.Router = autograd.NewParam(d, 1, w)
	}
	if cfg.Router == ref.RouterLinearBias {
		l.RouterBias = autograd.NewParam(1, 1, nil)
	}
	if cfg.HasPredictor() {
		h := cfg.PredictorWidth()
		l.Predictor = &Predictor{In: nn.NewLinear(d, h, true, rng), Out: nn.NewLinear(h, 1, true, rng)}
	}
	return l, nil
}

// Config returns the layer's configuration.
func (l *Layer) Config() ref.Config { return l.cfg }

// SetCapacity changes the capacity rule, for instance each training step of
// a capacity annealing schedule (see AnnealedRatio), or returns an error
// naming the field that cannot work; the layer is then unchanged.
func (l *Layer) SetCapacity(c ref.Capacity) error {
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

// LayerResult is what a routed layer's forward computes. Out and AuxLoss
// live on the tape (valid until its Reset); the other fields are the layer's
// to give away.
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
	// the top-k choice (SPEC.md sections 8 and 9).
	TopK [][]int
	// Targets are t_i = 1 for the tokens of TopK, 0 otherwise (B·S).
	Targets []float32
	// Weights are g (SPEC.md section 6) at every valid position: r, σ(r) or
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
	// SPEC.md section 8 (PredictorBCE is 0 without a predictor), and Aux the
	// value of AuxLoss (0 when it is nil).
	RouterBCE, PredictorBCE, LoadBalance, Aux float64
	// Routed and Skipped count the valid tokens that went through the block
	// and around it; ComputeFraction is Routed/(Routed+Skipped).
	Routed, Skipped int
	ComputeFraction float64
	// FLOPs is the layer's forward cost against its dense twin.
	FLOPs LayerFLOPs
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
	if err := checkField("Noise", in.Noise, l.cfg.Router == ref.RouterRandom, "Router = random", n); err != nil {
		return bt, err
	}
	return bt, checkField("Jitter", in.Jitter, l.cfg.Jitter > 0, "Jitter > 0", n)
}

// Forward runs the layer on a batch (SPEC.md sections 2 to 9). An input
// that does not fit, a capacity rule that cannot hold for these lengths, or
// a NaN router weight (naming its row and position) is an error.
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
	cfg := l.cfg
	x := in.X
	padded := bt.padded()
	vpos := bt.validPositions()
	vidx := bt.rowsOf(nil, vpos)

	// Router weights r over every row, 0 at padded ones.
	var r *autograd.Tensor
	switch {
	case len(vidx) == 0:
		r = tp.Zeros(x.Rows, 1)
	case padded:
		r = l.routerLogits(tp, tp.GatherRows(x, vidx), in, vidx)
		r = tp.ScatterAddRows(tp.Zeros(x.Rows, 1), r, vidx)
	default:
		r = l.routerLogits(tp, x, in, vidx)
	}
	var q *autograd.Tensor
	if l.Predictor != nil {
		q = l.Predictor.Logits(tp, tp.StopGradient(x))
	}

	res, err := l.decide(bt, r, q)
	if err != nil {
		return nil, err
	}
	sel := res.Selected
	selIdx := bt.rowsOf(nil, sel)
	res.Targets = make([]float32, x.Rows)
	for _, k := range bt.rowsOf(nil, res.TopK) {
		res.Targets[k] = 1
	}

	// The weight g and the multiplier of f at the rows where f is computed.
	g := l.weights(tp, r, sel, selIdx)
	cidx, cpos := selIdx, sel
	var mult *autograd.Tensor
	if cfg.Compute == ref.ComputeDense {
		cidx, cpos = vidx, vpos
		gv := g
		if cfg.Weighting == ref.WeightSoftmax {
			gv = tp.ScatterAddRows(tp.Zeros(x.Rows, 1), g, selIdx)
		}
		if padded {
			gv = tp.GatherRows(gv, vidx)
		}
		// Dense compute is top-k only (causal routing rejects it), so the
		// selection mask is the targets.
		m := make([]float32, len(vidx))
		for j, k := range vidx {
			m[j] = res.Targets[k]
		}
		mult = straightThrough(tp, gv, autograd.New(len(vidx), 1, m))
	} else {
		mult = g
		if cfg.Weighting != ref.WeightSoftmax {
			mult = tp.GatherRows(g, selIdx)
		}
	}
	res.Out = l.apply(tp, x, padded, vidx, vpos, cidx, cpos, mult)

	l.report(res, bt, r, g, q, cidx, mult, selIdx)
	l.losses(tp, res, bt, padded, r, q)
	res.FLOPs = layerFLOPs(cfg, bt.lengths(), res.Capacity)
	if n := res.Routed + res.Skipped; n > 0 {
		res.ComputeFraction = float64(res.Routed) / float64(n)
	}
	return res, nil
}

// straightThrough is the weight of SPEC.md section 7,
// w = g + sg(m·g − g): its value is m·g exactly (g + (g − g) = g and
// g + (0 − g) = 0 in floating point) and its derivative with respect to g
// is 1 for every token, selected (m = 1) or not.
func straightThrough(tp *autograd.Tape, g, m *autograd.Tensor) *autograd.Tensor {
	return tp.Add(g, tp.StopGradient(tp.Sub(tp.Mul(g, m), g)))
}

// decide makes the routing decision of SPEC.md sections 4 and 9 from the
// router weights r (or the predictor logits q, for Causal = predictor): the
// selected positions of every sequence, its capacity and the counts of
// routed and skipped tokens.
func (l *Layer) decide(bt batch, r, q *autograd.Tensor) (*LayerResult, error) {
	res := &LayerResult{Selected: make([][]int, bt.rows), TopK: make([][]int, bt.rows), Capacity: make([]int, bt.rows)}
	for b := range bt.rows {
		v := bt.validLen(b)
		row := r.Data[b*bt.s : b*bt.s+v]
		k, err := Capacity(l.cfg.Capacity, v, bt.s)
		if err == nil {
			res.TopK[b], l.order, err = selectTopK([]int{}, l.order, row, k)
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", b, err)
		}
		switch l.cfg.Causal {
		case ref.CausalRouter:
			res.Selected[b], err = selectCausal([]int{}, row)
		case ref.CausalPredictor:
			res.Selected[b], err = selectCausal([]int{}, q.Data[b*bt.s:b*bt.s+v])
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

// apply is Eq. 1: out = base + mult·f at the rows cidx (positions cpos),
// base elsewhere, where base is x, or x + Attn(N1(x)) over the valid tokens
// for MLP-only routing, and f is the block's update of the tokens cidx as
// sequences (MLP-only: MLP(N2(base)) of each).
func (l *Layer) apply(tp *autograd.Tape, x *autograd.Tensor, padded bool, vidx []int, vpos [][]int,
	cidx []int, cpos [][]int, mult *autograd.Tensor) *autograd.Tensor {
	base := x
	if l.cfg.MLPOnly && len(vidx) > 0 {
		if padded {
			base = tp.ScatterAddRows(x, l.blk.attnUpdate(tp, tp.GatherRows(x, vidx), vpos), vidx)
		} else {
			base = tp.Add(x, l.blk.attnUpdate(tp, x, vpos))
		}
	}
	if len(cidx) == 0 {
		return base
	}
	// Every row, in order: no gather or scatter needed.
	all := len(cidx) == x.Rows
	xs := base
	if !l.cfg.MLPOnly {
		xs = x
	}
	if !all {
		xs = tp.GatherRows(xs, cidx)
	}
	var f *autograd.Tensor
	if l.cfg.MLPOnly {
		f = l.blk.MLPUpdate(tp, xs)
	} else {
		f = l.blk.update(tp, xs, cpos)
	}
	upd := tp.Mul(f, mult)
	if all {
		return tp.Add(base, upd)
	}
	return tp.ScatterAddRows(base, upd, cidx)
}

// report copies r, g, the multipliers and q into the result.
func (l *Layer) report(res *LayerResult, bt batch, r, g, q *autograd.Tensor, cidx []int, mult *autograd.Tensor, selIdx []int) {
	n := bt.rows * bt.s
	res.RouterLogits = append([]float32(nil), r.Data...)
	res.Weights = make([]float32, n)
	if l.cfg.Weighting == ref.WeightSoftmax {
		for j, k := range selIdx {
			res.Weights[k] = g.Data[j]
		}
	} else {
		for k := range n {
			if bt.isValid(k) {
				res.Weights[k] = g.Data[k]
			}
		}
	}
	res.Multipliers = make([]float32, n)
	for j, k := range cidx {
		res.Multipliers[k] = mult.Data[j]
	}
	if q != nil {
		res.PredictorLogits = make([]float32, n)
		for k := range n {
			if bt.isValid(k) {
				res.PredictorLogits[k] = q.Data[k]
			}
		}
	}
}
