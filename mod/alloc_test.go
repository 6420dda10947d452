package mod_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/spec"
)

// stepCase is a small model and two batches for it: step runs one forward
// and backward pass, as a training step does before the optimiser.
type stepCase struct {
	name  string
	cfg   spec.ModelConfig
	valid []int
}

// stepCases covers every routing choice on a model with dense and routed
// layers (every other layer routed), each choice once on top of the default
// routing (linear router, raw weighting, gather compute, capacity 1/2), and
// a dense model; padded batches too.
func stepCases(t *testing.T) []stepCase {
	t.Helper()
	blk := spec.DefaultBlockConfig(8, 2, 16)
	edits := []struct {
		name string
		edit func(*spec.Config)
	}{
		{"default", func(*spec.Config) {}},
		{"linear_bias", func(c *spec.Config) { c.Router = spec.RouterLinearBias }},
		{"l2norm", func(c *spec.Config) { c.Router = spec.RouterL2Norm }},
		{"random", func(c *spec.Config) { c.Router = spec.RouterRandom }},
		{"jitter", func(c *spec.Config) { c.Jitter = 0.1 }},
		{"sigmoid", func(c *spec.Config) { c.Weighting = spec.WeightSigmoid }},
		{"softmax", func(c *spec.Config) { c.Weighting = spec.WeightSoftmax }},
		{"none", func(c *spec.Config) { c.Weighting = spec.WeightNone }},
		{"dense-compute", func(c *spec.Config) { c.Compute = spec.ComputeDense; c.Weighting = spec.WeightSigmoid }},
		{"mlp-only", func(c *spec.Config) { c.MLPOnly = true }},
		{"router_bce-load-balance", func(c *spec.Config) { c.Aux, c.AuxWeight, c.LoadBalanceWeight = spec.AuxRouterBCE, 0.1, 0.01 }},
		{"predictor", func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxPredictor, 0.1 }},
		{"causal-router", func(c *spec.Config) { c.Causal, c.Aux, c.AuxWeight = spec.CausalRouter, spec.AuxRouterBCE, 0.1 }},
		{"causal-predictor", func(c *spec.Config) { c.Causal, c.Aux, c.AuxWeight = spec.CausalPredictor, spec.AuxPredictor, 0.1 }},
		{"integer-capacity", func(c *spec.Config) { c.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 3} }},
		{"learned-positions-layernorm", func(c *spec.Config) { c.Block.Positions, c.Block.Norm = spec.PositionLearned, spec.NormLayer }},
		{"window", func(c *spec.Config) { c.Block.Window = 3 }},
	}
	var cases []stepCase
	for _, e := range edits {
		routing := spec.DefaultConfig(blk, 0.5)
		e.edit(&routing)
		maxLen := 0
		if routing.Block.Positions == spec.PositionLearned {
			maxLen = 16
		}
		for _, pattern := range []spec.Pattern{{Kind: spec.PatternEveryOther}, {Kind: spec.PatternAll}} {
			cfg, err := spec.NewModelConfig(32, maxLen, 3, routing, pattern, nil)
			if err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
			name := e.name + "/" + string(pattern.Kind)
			cases = append(cases, stepCase{name, cfg, nil}, stepCase{name + "/padded", cfg, []int{7, 0, 3}})
		}
	}
	dense, err := spec.NewModelConfig(32, 0, 2, spec.DefaultConfig(blk, 0.5), spec.Pattern{Kind: spec.PatternList}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(cases, stepCase{"dense", dense, nil}, stepCase{"dense/padded", dense, []int{7, 0, 3}})
}

// inputs draws a batch of 3 sequences of 7 tokens for the case, with the
// router noise and jitter draws its layers need.
func (c stepCase) inputs(seed uint64) mod.ModelInputs {
	const rows, s = 3, 7
	rng := rand.New(rand.NewPCG(seed, 7))
	in := mod.ModelInputs{Tokens: make([][]int, rows), Targets: make([][]int, rows), Valid: c.valid}
	for b := range rows {
		in.Tokens[b], in.Targets[b] = make([]int, s), make([]int, s)
		for i := range s {
			in.Tokens[b][i], in.Targets[b][i] = rng.IntN(c.cfg.Vocab), rng.IntN(c.cfg.Vocab)
		}
	}
	field := func(use func(spec.Config) bool) [][]float32 {
		var f [][]float32
		for l, ml := range c.cfg.Layers {
			if ml.Routed && use(ml.Config) {
				if f == nil {
					f = make([][]float32, len(c.cfg.Layers))
				}
				f[l] = make([]float32, rows*s)
				for k := range f[l] {
					f[l][k] = float32(rng.NormFloat64())
				}
			}
		}
		return f
	}
	in.Noise = field(func(c spec.Config) bool { return c.Router == spec.RouterRandom })
	in.Jitter = field(func(c spec.Config) bool { return c.Jitter > 0 })
	return in
}

// stepper runs forward and backward passes of one model on one reused tape.
type stepper struct {
	m      *mod.Model
	params []*autograd.Tensor
	tp     autograd.Tape
}

func newStepper(t *testing.T, cfg spec.ModelConfig) *stepper {
	t.Helper()
	m, err := mod.NewModel(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	return &stepper{m: m, params: mod.Tensors(m.Params())}
}

// step resets the tape and the gradients and runs one pass on in.
func (st *stepper) step(t *testing.T, in mod.ModelInputs) *mod.ModelResult {
	st.tp.Reset()
	for _, p := range st.params {
		p.ZeroGrad()
	}
	res, err := st.m.Forward(&st.tp, in)
	if err != nil {
		t.Fatal(err)
	}
	st.tp.Backward(res.Loss)
	return res
}

// TestStepAllocatesNothing checks that a model's forward and backward pass
// on a reused tape allocates nothing once the tape has seen one pass, for
// every routing choice, dense and padded (issue 11).
func TestStepAllocatesNothing(t *testing.T) {
	for _, c := range stepCases(t) {
		t.Run(c.name, func(t *testing.T) {
			st := newStepper(t, c.cfg)
			in := c.inputs(1)
			st.step(t, in)
			if n := testing.AllocsPerRun(5, func() { st.step(t, in) }); n != 0 {
				t.Errorf("a step allocates %v times after warm-up, want 0", n)
			}
		})
	}
}

// TestReusedTapeGivesFreshBits checks that a step on a tape reused after
// passes on other batches (whose memory the tape hands out again) gives the
// bits of the same step on a fresh model and tape: logits, losses, every
// routed layer's result and every gradient.
func TestReusedTapeGivesFreshBits(t *testing.T) {
	for _, c := range stepCases(t) {
		t.Run(c.name, func(t *testing.T) {
			reused := newStepper(t, c.cfg)
			for seed := range uint64(3) {
				reused.step(t, c.inputs(10+seed))
			}
			in := c.inputs(1)
			got := reused.step(t, in)
			fresh := newStepper(t, c.cfg)
			want := fresh.step(t, in)
			same := func(what string, a, b []float32) {
				t.Helper()
				if len(a) != len(b) {
					t.Fatalf("%s: %d values on the reused tape, %d on a fresh one", what, len(a), len(b))
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%s differs at %d: %v on the reused tape, %v on a fresh one", what, i, a[i], b[i])
					}
				}
			}
			same("logits", got.Logits.Data, want.Logits.Data)
			same("loss", got.Loss.Data, want.Loss.Data)
			if got.CE != want.CE || got.Aux != want.Aux || got.FLOPs.Ratio != want.FLOPs.Ratio {
				t.Fatalf("CE, Aux, FLOPs ratio %v %v %v on the reused tape, %v %v %v on a fresh one", got.CE, got.Aux, got.FLOPs.Ratio, want.CE, want.Aux, want.FLOPs.Ratio)
			}
			for l, lr := range want.Layers {
				g := got.Layers[l]
				if (g == nil) != (lr == nil) {
					t.Fatalf("layer %d: result %v on the reused tape, %v on a fresh one", l, g != nil, lr != nil)
				}
				if lr == nil {
					continue
				}
				pre := fmt.Sprintf("layer %d ", l)
				same(pre+"out", g.Out.Data, lr.Out.Data)
				same(pre+"router logits", g.RouterLogits, lr.RouterLogits)
				same(pre+"weights", g.Weights, lr.Weights)
				same(pre+"multipliers", g.Multipliers, lr.Multipliers)
				same(pre+"targets", g.Targets, lr.Targets)
				same(pre+"predictor logits", g.PredictorLogits, lr.PredictorLogits)
				same(pre+"STE offsets", g.Frozen.STEOffset, lr.Frozen.STEOffset)
				same(pre+"predictor input", g.Frozen.PredictorInput, lr.Frozen.PredictorInput)
				if fmt.Sprint(g.Selected, g.TopK, g.Capacity, g.Routed, g.Skipped, g.FLOPs) != fmt.Sprint(lr.Selected, lr.TopK, lr.Capacity, lr.Routed, lr.Skipped, lr.FLOPs) {
					t.Fatalf("%sdecision %v %v on the reused tape, %v %v on a fresh one", pre, g.Selected, g.TopK, lr.Selected, lr.TopK)
				}
				if g.RouterBCE != lr.RouterBCE || g.PredictorBCE != lr.PredictorBCE || g.LoadBalance != lr.LoadBalance || g.Aux != lr.Aux || g.PredictorAccuracy != lr.PredictorAccuracy {
					t.Fatalf("%slosses differ: %+v on the reused tape, %+v on a fresh one", pre, g, lr)
				}
			}
			ps, fs := reused.m.Params(), fresh.m.Params()
			for i := range ps {
				same("gradient of "+ps[i].Name, ps[i].T.Grad, fs[i].T.Grad)
			}
		})
	}
}
