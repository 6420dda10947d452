package mod_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
	"pgregory.net/rapid"
)

// modelCase is a drawn model with ref's parameters (rounded to float32) and
// inputs.
type modelCase struct {
	cfg spec.ModelConfig
	p   *ref.ModelParams
	in  ref.ModelInputs
}

// drawPattern draws a layer pattern for n layers.
func drawPattern(t *rapid.T, n int) spec.Pattern {
	switch rapid.IntRange(0, 4).Draw(t, "pattern") {
	case 0:
		return spec.Pattern{Kind: spec.PatternAll}
	case 1:
		return spec.Pattern{Kind: spec.PatternEveryOther}
	case 2:
		return spec.Pattern{Kind: spec.PatternEveryNth, Every: rapid.IntRange(1, 3).Draw(t, "every"), Offset: rapid.IntRange(0, n-1).Draw(t, "offset")}
	case 3:
		start := rapid.IntRange(0, n).Draw(t, "dense_start")
		return spec.Pattern{Kind: spec.PatternDenseEnds, DenseStart: start, DenseEnd: rapid.IntRange(0, n-start).Draw(t, "dense_end")}
	}
	return spec.Pattern{Kind: spec.PatternList, Layers: rapid.SliceOfNDistinct(rapid.IntRange(0, n-1), 0, n, func(l int) int { return l }).Draw(t, "layers")}
}

// drawModelCase draws a model of 2 to 4 layers over every routing choice
// and pattern, with RoPE or learned positions and optional padding. With
// causal set, routed layers use causal routing (and no random router or
// jitter, which decoding rejects).
func drawModelCase(t *rapid.T, causal bool) modelCase {
	// d = 4 is left to the layer tests: after a few layers the residual
	// stream's mean dominates its spread and a 4-wide LayerNorm loses float32
	// digits to cancellation (measured up to 5e-4 of scale in gradients).
	blk := drawBlock(t, 8)
	rows, s := rapid.IntRange(2, 3).Draw(t, "B"), rapid.IntRange(3, 8).Draw(t, "S")
	maxLen := 0
	if rapid.Bool().Draw(t, "learned") {
		blk.Positions, maxLen = spec.PositionLearned, s+rapid.IntRange(0, 2).Draw(t, "spare")
	}
	routing := drawRouting(t, blk, s)
	if causal {
		routing.Causal = rapid.SampledFrom([]spec.CausalRouting{spec.CausalRouter, spec.CausalPredictor}).Draw(t, "causal rule")
		routing.Router = rapid.SampledFrom([]spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm}).Draw(t, "causal router")
		routing.Jitter = 0
		routing.Compute = spec.ComputeGather
		if routing.Weighting == spec.WeightSoftmax {
			routing.Weighting = spec.WeightSigmoid
		}
		if routing.Router == spec.RouterL2Norm && routing.Causal == spec.CausalRouter {
			// ‖x‖ > 0 routes every token; still causal, and still a case.
			routing.Weighting = spec.WeightNone
		}
	}
	n := rapid.IntRange(2, 4).Draw(t, "layers")
	cfg, err := spec.NewModelConfig(rapid.IntRange(5, 9).Draw(t, "vocab"), maxLen, n, routing, drawPattern(t, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	seed := rapid.Uint64().Draw(t, "seed")
	c := modelCase{cfg: cfg, p: ref.NewModelParams(cfg, seed)}
	roundParams(c.p.Tensors())
	rng := ref.NewRand(seed ^ 1)
	c.in.Tokens, c.in.Targets = ref.RandomTokens(rng, rows, s, cfg.Vocab)
	c.in.Valid = drawValid(t, rows, s)
	for b := range rows {
		for i := range s {
			if c.in.Valid != nil && i >= c.in.Valid[b] || rng.IntN(5) == 0 {
				c.in.Targets[b][i] = ref.IgnoreTarget
			}
		}
	}
	for _, ml := range cfg.Layers {
		var noise, jitter [][]float64
		if ml.Routed && ml.Config.Router == spec.RouterRandom {
			noise = ref.RandomField(rng, rows, s)
		}
		if ml.Routed && ml.Config.Jitter > 0 {
			jitter = ref.RandomField(rng, rows, s)
		}
		for _, f := range [][][]float64{noise, jitter} {
			for _, r := range f {
				round32(r)
			}
		}
		c.in.Noise = append(c.in.Noise, noise)
		c.in.Jitter = append(c.in.Jitter, jitter)
	}
	return c
}

// fdCoordinates is how many coordinates of each parameter the model test
// differentiates numerically (chosen at random), to keep the suite fast.
const fdCoordinates = 6

// checkModelAgainstRef runs mod's model and compares logits, losses,
// routing, FLOPs and a sample of every parameter's gradient with ref.
func checkModelAgainstRef(t reporter, c modelCase, fdSeed uint64) {
	want := decisiveRefForward(t, c)
	m := modelFromRef(t, c.cfg, c.p)
	var tp autograd.Tape
	res, err := m.Forward(&tp, modcase.ModelInputsFromRef(c.in))
	if err != nil {
		t.Fatal(err)
	}
	s := len(c.in.Tokens[0])
	for l, lr := range want.Layers {
		if lr == nil {
			if res.Layers[l] != nil {
				t.Fatalf("layer %d is dense in ref, routed in mod", l)
			}
			continue
		}
		got := res.Layers[l]
		for b, p := range lr.Selection.Rows {
			if !slices.Equal(got.Selected[b], p) {
				t.Fatalf("layer %d row %d: mod selected %v, ref %v", l, b, got.Selected[b], p)
			}
		}
		compare(t, "model forward", fmt.Sprintf("L%d router logits", l), got.RouterLogits, flatField(lr.RouterWeights), validMask(c.in.Valid, s, 1), modelForwardTol)
		compare(t, "model forward", fmt.Sprintf("L%d aux", l), []float32{float32(got.Aux)}, []float64{lr.AuxLoss}, nil, modelForwardTol)
	}
	compare(t, "model forward", "logits", res.Logits.Data, flatBatch(want.Logits), validMask(c.in.Valid, s, c.cfg.Vocab), modelForwardTol)
	compare(t, "model forward", "loss", res.Loss.Data, []float64{want.Loss}, nil, modelForwardTol)
	compare(t, "model forward", "ce", []float32{float32(res.CE)}, []float64{want.CE}, nil, modelForwardTol)
	checkModelFLOPs(t, res.FLOPs, want.FLOPs)

	tp.Backward(res.Loss)
	refLoss := func() (float64, error) {
		r, err := ref.ModelForwardFrozen(c.cfg, c.p, c.in, want.Frozen)
		if err != nil {
			return 0, err
		}
		return r.Loss, nil
	}
	rng := rand.New(rand.NewPCG(fdSeed, 0))
	mp := m.Params()
	for i, pt := range c.p.Tensors() {
		if mp[i].Name != pt.Name {
			t.Fatalf("parameter %d is %s in mod, %s in ref", i, mp[i].Name, pt.Name)
		}
		fdCompare(t, "model gradient", "grad "+pt.Name, mp[i].T.Grad, pt.Data, refLoss, fdCoordinates, rng, modelGradTol)
	}
}

// checkModelFLOPs compares mod's FLOPs accounting with ref's.
func checkModelFLOPs(t reporter, got mod.ModelFLOPs, want ref.ModelFLOPs) {
	t.Helper()
	same := len(got.Layers) == len(want.Layers) && got.Head == want.Head && got.Total == want.Total &&
		got.Dense == want.Dense && got.Ratio == want.Ratio
	for l := range min(len(got.Layers), len(want.Layers)) {
		same = same && got.Layers[l] == mod.LayerFLOPs(want.Layers[l])
	}
	if !same {
		t.Errorf("FLOPs %+v, ref %+v", got, want)
	}
}

// TestModelMatchesRef draws models over every layer pattern, routing
// choice, position encoding and padding, and checks mod's forward, FLOPs
// and gradients against ref.
func TestModelMatchesRef(t *testing.T) {
	rapidChecks(40)
	rapid.Check(t, func(t *rapid.T) { checkModelAgainstRef(t, drawModelCase(t, false), rapid.Uint64().Draw(t, "fd seed")) })
}

// TestCausalModelMatchesRef is TestModelMatchesRef in causal routing mode.
func TestCausalModelMatchesRef(t *testing.T) {
	rapidChecks(40)
	rapid.Check(t, func(t *rapid.T) { checkModelAgainstRef(t, drawModelCase(t, true), rapid.Uint64().Draw(t, "fd seed")) })
}
