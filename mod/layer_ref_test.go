package mod_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// Tolerances of mod (float32) against ref (float64), relative to the scale
// max(‖expected‖∞, 1) of each compared array (an element passes when
// |got − want| <= tol.scale·scale). They were set from the largest errors
// measured over 1000 drawn cases of the layer test and 1500 of each model
// test (go test -v prints the measurements), with a margin of 3 to 4x; the
// layer figures were measured again over 3000 drawn cases once LayerNorm
// standardised in float64 (autograd's Standardize), which removed a tail of
// up to 1.55e-5 on rows of nearly equal features, and again over 3000 once
// the draws included sliding windows (docs/spec.md §13; forward 4.4e-7,
// gradient 3.3e-6, 2026-11-22, on a loaded 2-core machine, which does not
// change the values):
//
//	layer forward    4.6e-7  -> 3e-6
//	layer gradient   3.3e-6  -> 1.5e-5
//	model forward    2.5e-6  -> 1e-5  (logits, after up to 4 layers whose raw
//	                                   router weights multiply the update)
//	model gradient   9.3e-5  -> 3e-4  (LayerNorm gains deep in the model; the
//	                                   other parameters stay below 3e-5)
//
// ref's central differences are exact to ~1e-9 at these sizes, so the
// differences are float32 round-off of mod.
var (
	forwardTol      = tol{scale: 3e-6}
	gradTol         = tol{scale: 1.5e-5}
	modelForwardTol = tol{scale: 1e-5}
	modelGradTol    = tol{scale: 3e-4}
)

// selectionMargin is how far from a tie a routing decision must be for mod
// and ref to be required to agree on it: float32 router weights are off by
// ~1e-6 of their scale.
const selectionMargin = 1e-4

// layerCase is a drawn layer configuration with ref's parameters, inputs
// and upstream gradient, all rounded to float32.
type layerCase struct {
	cfg spec.Config
	p   *ref.LayerParams
	in  ref.LayerInputs
	u   []float64 // B·S·d upstream gradient of out
}

// drawBlock draws a small block shape with width d >= minD, with as many
// key and value heads as heads or fewer (grouped-query attention), with or
// without biases on q, k and v, half of the time with a sliding attention
// window of 1 to 4 positions.
func drawBlock(t *rapid.T, minD int) spec.BlockConfig {
	var shapes [][2]int
	for _, sh := range [][2]int{{4, 1}, {4, 2}, {8, 1}, {8, 2}, {8, 4}} {
		if sh[0] >= minD {
			shapes = append(shapes, sh)
		}
	}
	shape := rapid.SampledFrom(shapes).Draw(t, "d,heads")
	blk := spec.DefaultBlockConfig(shape[0], shape[1], rapid.SampledFrom([]int{6, 8}).Draw(t, "dff"))
	blk.KVHeads = rapid.SampledFrom([]int{0, 1, shape[1] / 2}).Draw(t, "kv_heads") // 0 for 1 head
	blk.QKVBias = rapid.Bool().Draw(t, "qkv_bias")
	if rapid.Bool().Draw(t, "layernorm") {
		blk.Norm, blk.NormEps = spec.NormLayer, 1e-5
	}
	if rapid.Bool().Draw(t, "swiglu") {
		blk.MLP = spec.ActSwiGLU
	}
	if rapid.Bool().Draw(t, "windowed") {
		blk.Window = rapid.IntRange(1, 4).Draw(t, "window") // docs/spec.md §13
	}
	return blk
}

// drawRouting draws every routing choice of a routed layer, for sequences
// of s positions.
func drawRouting(t *rapid.T, blk spec.BlockConfig, s int) spec.Config {
	cfg := spec.DefaultConfig(blk, 0.5)
	cfg.Router = rapid.SampledFrom([]spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm, spec.RouterRandom}).Draw(t, "router")
	if rapid.Bool().Draw(t, "jitter") {
		cfg.Jitter = 0.1
	}
	cfg.Causal = rapid.SampledFrom([]spec.CausalRouting{spec.CausalOff, spec.CausalOff, spec.CausalRouter, spec.CausalPredictor}).Draw(t, "causal")
	weightings := []spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightSoftmax, spec.WeightNone}
	computes := []spec.Compute{spec.ComputeGather, spec.ComputeDense}
	if cfg.Causal != spec.CausalOff {
		weightings, computes = weightings[:2], computes[:1]
	}
	cfg.Weighting = rapid.SampledFrom(weightings).Draw(t, "weighting")
	cfg.Compute = rapid.SampledFrom(computes).Draw(t, "compute")
	cfg.MLPOnly = rapid.Bool().Draw(t, "mlp_only")
	cfg.Aux = rapid.SampledFrom([]spec.AuxObjective{spec.AuxNone, spec.AuxRouterBCE, spec.AuxPredictor}).Draw(t, "aux")
	if cfg.Aux != spec.AuxNone {
		cfg.AuxWeight = 0.1
	}
	if rapid.Bool().Draw(t, "load_balance") {
		cfg.LoadBalanceWeight = 0.01
	}
	switch rapid.IntRange(0, 2).Draw(t, "capacity") {
	case 0:
		cfg.Capacity = spec.Capacity{Kind: spec.CapacityRatio, Ratio: rapid.SampledFrom([]float64{0.125, 0.25, 0.29, 0.5, 0.75, 1}).Draw(t, "ratio")}
	case 1:
		cfg.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: rapid.IntRange(1, s).Draw(t, "tokens")}
	default:
		cfg.Capacity = spec.Capacity{Kind: spec.CapacityLog, Ratio: 0.25, MaxLen: rapid.IntRange(s, 2*s).Draw(t, "max_len")}
	}
	return cfg
}

// drawValid draws right padding for b sequences of s positions, or nil.
func drawValid(t *rapid.T, b, s int) []int {
	if !rapid.Bool().Draw(t, "padding") {
		return nil
	}
	return rapid.SliceOfN(rapid.IntRange(0, s), b, b).Draw(t, "valid")
}

func drawLayerCase(t *rapid.T) layerCase {
	blk := drawBlock(t, 4)
	rows, s := rapid.IntRange(2, 3).Draw(t, "B"), rapid.IntRange(3, 9).Draw(t, "S")
	cfg := drawRouting(t, blk, s)
	rng := ref.NewRand(rapid.Uint64().Draw(t, "seed"))
	c := layerCase{cfg: cfg, p: ref.NewLayerParams(cfg, rng)}
	roundParams(c.p.Tensors(""))
	c.in.Valid = drawValid(t, rows, s)
	for range rows {
		x := ref.RandomMatrix(rng, s, blk.D, 1)
		round32(x.RawMatrix().Data)
		c.in.X = append(c.in.X, x)
	}
	field := func() [][]float64 {
		f := ref.RandomField(rng, rows, s)
		for _, r := range f {
			round32(r)
		}
		return f
	}
	if cfg.Router == spec.RouterRandom {
		c.in.Noise = field()
	}
	if cfg.Jitter > 0 {
		c.in.Jitter = field()
	}
	c.u = flatBatch([]*mat.Dense{ref.RandomMatrix(rng, rows*s, blk.D, 1)})
	round32(c.u)
	return c
}

// decisive reports whether ref's routing decision is at least
// selectionMargin from a flip in every sequence.
func decisive(cfg spec.Config, res *ref.LayerResult, valid []int) bool {
	score := res.RouterWeights
	switch cfg.Causal {
	case spec.CausalPredictor:
		score = res.PredictorLogits
	case spec.CausalOff:
		for _, g := range ref.BoundaryGaps(res.RouterWeights, res.Capacity, valid) {
			if g < selectionMargin {
				return false
			}
		}
		return true
	}
	for b, row := range score {
		for i := range row {
			if (valid == nil || i < valid[b]) && math.Abs(row[i]) < selectionMargin {
				return false
			}
		}
	}
	return true
}

// checkLayerAgainstRef runs mod's layer and compares every result and
// gradient with ref's at mod's routing decision; with fdSample > 0, each
// parameter's gradient only at that many coordinates drawn at random.
func checkLayerAgainstRef(t reporter, c layerCase, fdSample int) {
	l := layerFromRef(t, c.cfg, c.p)
	in := modcase.LayerInputsFromRef(c.in)
	var tp autograd.Tape
	res, err := l.Forward(&tp, in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.LayerForward(c.cfg, c.p, c.in)
	if err != nil {
		t.Fatal(err)
	}
	if decisive(c.cfg, want, c.in.Valid) {
		for b, p := range want.Selection.Rows {
			if !slices.Equal(res.Selected[b], p) {
				t.Fatalf("row %d: mod selected %v, ref %v", b, res.Selected[b], p)
			}
		}
	}
	fz, err := ref.NewFrozen(c.cfg, c.p, c.in, refSelection(in.SeqLen, res.Selected))
	if err != nil {
		t.Fatal(err)
	}
	want, err = ref.LayerForwardFrozen(c.cfg, c.p, c.in, fz)
	if err != nil {
		t.Fatal(err)
	}
	d, s := c.cfg.Block.D, in.SeqLen
	valid := validMask(c.in.Valid, s, 1)
	compare(t, "layer forward", "out", res.Out.Data, flatBatch(want.Out), validMask(c.in.Valid, s, d), forwardTol)
	// The same decision and constants replayed by mod's frozen forward.
	var tpf autograd.Tape
	resf, err := l.ForwardFrozen(&tpf, modcase.LayerInputsFromRef(c.in), modcase.FrozenFromRef(fz))
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "layer forward", "frozen out", resf.Out.Data, flatBatch(want.Out), validMask(c.in.Valid, s, d), forwardTol)
	if want.PredictorLogits != nil {
		compare(t, "layer forward", "frozen predictor bce", []float32{float32(resf.PredictorBCE)}, []float64{want.PredictorBCE}, nil, forwardTol)
	}
	compare(t, "layer forward", "router logits", res.RouterLogits, flatField(want.RouterWeights), valid, forwardTol)
	compare(t, "layer forward", "weights", res.Weights, flatField(want.Weights), valid, forwardTol)
	compare(t, "layer forward", "multipliers", res.Multipliers, flatField(want.Multipliers), valid, forwardTol)
	compare(t, "exact", "targets", res.Targets, flatField(want.Targets), valid, tol{scale: 1e-300})
	if want.PredictorLogits != nil {
		compare(t, "layer forward", "predictor logits", res.PredictorLogits, flatField(want.PredictorLogits), valid, forwardTol)
		compare(t, "layer forward", "predictor bce", []float32{float32(res.PredictorBCE)}, []float64{want.PredictorBCE}, nil, forwardTol)
		if math.Abs(res.PredictorAccuracy-want.PredictorAccuracy) > 1e-12 && decisive(spec.Config{Causal: spec.CausalPredictor}, want, c.in.Valid) {
			t.Errorf("predictor accuracy %v, ref %v", res.PredictorAccuracy, want.PredictorAccuracy)
		}
	}
	for _, sc := range []struct {
		name      string
		got, want float64
	}{{"router bce", res.RouterBCE, want.RouterBCE}, {"load balance", res.LoadBalance, want.LoadBalance}, {"aux", res.Aux, want.AuxLoss}} {
		compare(t, "layer forward", sc.name, []float32{float32(sc.got)}, []float64{sc.want}, nil, forwardTol)
	}
	if res.Routed != want.Routed || res.Skipped != want.Skipped {
		t.Errorf("routed %d skipped %d, ref %d and %d", res.Routed, res.Skipped, want.Routed, want.Skipped)
	}
	if res.FLOPs != (mod.LayerFLOPs(want.FLOPs)) {
		t.Errorf("FLOPs %+v, ref %+v", res.FLOPs, want.FLOPs)
	}

	// Gradients of Σ u⊙out + aux against ref's frozen-decision central
	// differences.
	loss := tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, to32(c.u))))
	if res.AuxLoss != nil {
		loss = tp.Add(loss, res.AuxLoss)
	}
	tp.Backward(loss)
	refLoss := func() (float64, error) {
		r, err := ref.LayerForwardFrozen(c.cfg, c.p, c.in, fz)
		if err != nil {
			return 0, err
		}
		return dot(r.Out, c.u) + r.AuxLoss, nil
	}
	rng := rand.New(rand.NewPCG(uint64(fdSample), 1))
	off := 0
	for b, x := range c.in.X {
		data := x.RawMatrix().Data
		fdCompare(t, "layer gradient", fmt.Sprintf("grad x[%d]", b), in.X.Grad[off:off+len(data)], data, refLoss, fdSample, rng, gradTol)
		off += len(data)
	}
	mp := l.Params("")
	for i, pt := range c.p.Tensors("") {
		if mp[i].Name != pt.Name {
			t.Fatalf("parameter %d is %s in mod, %s in ref", i, mp[i].Name, pt.Name)
		}
		fdCompare(t, "layer gradient", "grad "+pt.Name, mp[i].T.Grad, pt.Data, refLoss, fdSample, rng, gradTol)
	}
}

// fdCompare compares the gradient got of a parameter whose values are data
// with ref's central differences of refLoss: at every coordinate when
// sample is 0, else at sample coordinates drawn from rng.
func fdCompare(t reporter, kind, what string, got []float32, data []float64, refLoss func() (float64, error), sample int, rng *rand.Rand, tl tol) {
	t.Helper()
	if sample == 0 || sample >= len(data) {
		g, err := ref.FDGradient(refLoss, data, 0)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, kind, what, got, g, nil, tl)
		return
	}
	var sub32 []float32
	var fd []float64
	for range sample {
		k := rng.IntN(len(data))
		g, err := ref.FDDerivative(refLoss, data, k, 0)
		if err != nil {
			t.Fatal(err)
		}
		sub32, fd = append(sub32, got[k]), append(fd, g)
	}
	compare(t, kind, what, sub32, fd, nil, tl)
}

// TestLayerMatchesRef draws routed layers over every router, weighting,
// compute mode, auxiliary objective, capacity rule, causal rule, norm, MLP
// and padding, and checks mod's forward and every gradient against ref.
func TestLayerMatchesRef(t *testing.T) {
	rapidChecks(60)
	rapid.Check(t, func(t *rapid.T) { checkLayerAgainstRef(t, drawLayerCase(t), 0) })
}
