package mod

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// TestStraightThroughDerivative checks docs/spec.md §7 exactly: the
// straight-through weight equals m·g, and ∂(Σ c_i w_i)/∂g_i = c_i for
// selected and unselected tokens alike. The formula found in the wild,
// w = g·m + (g − sg(g)), has derivative m + 1 and fails here on every
// selected token; w = m·g fails on every unselected one.
func TestStraightThroughDerivative(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 12
	gv, mv, c := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		gv[i], c[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		if i%3 == 0 {
			mv[i] = 1
		}
	}
	g := autograd.NewParam(n, 1, gv)
	var tp autograd.Tape
	w := tp.Add(g, steOffset(&tp, g, autograd.New(n, 1, mv)))
	tp.Backward(tp.SumAll(tp.Mul(w, autograd.New(n, 1, c))))
	for i := range n {
		if w.Data[i] != mv[i]*gv[i] {
			t.Errorf("w[%d] = %v, want m·g = %v", i, w.Data[i], mv[i]*gv[i])
		}
		if g.Grad[i] != c[i] {
			t.Errorf("token %d (m = %v): ∂loss/∂g = %v, want %v (∂w/∂g = 1)", i, mv[i], g.Grad[i], c[i])
		}
	}
}

// TestStraightThroughRouterGradient checks the same through a whole dense
// layer with raw weighting: r = w_r·x and g = r, so with ∂w/∂g = 1 the
// router weight's gradient of Σ U⊙out is Σ_i (U_i·f_i) x_i over every
// token, where f is the block's update of all tokens.
func TestStraightThroughRouterGradient(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.25)
	cfg.Compute = spec.ComputeDense
	rng := rand.New(rand.NewPCG(5, 6))
	l, err := NewLayer(cfg, rng)
	if err != nil {
		t.Fatal(err)
	}
	const rows, s, d = 2, 8, 8
	x, u := make([]float32, rows*s*d), make([]float32, rows*s*d)
	for i := range x {
		x[i], u[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	var tp autograd.Tape
	res, err := l.Forward(&tp, LayerInputs{X: autograd.New(rows*s, d, x), Batch: rows, SeqLen: s})
	if err != nil {
		t.Fatal(err)
	}
	tp.Backward(tp.SumAll(tp.Mul(res.Out, autograd.New(rows*s, d, u))))
	var ftp autograd.Tape
	f := l.blk.update(&ftp, autograd.New(rows*s, d, x), [][]int{iota(s), iota(s)})
	want := make([]float64, d)
	for i := range rows * s {
		var uf float64
		for j := range d {
			uf += float64(u[i*d+j] * f.Data[i*d+j])
		}
		for j := range d {
			want[j] += uf * float64(x[i*d+j])
		}
	}
	// The bound of the layer gradient comparisons with ref (layer_ref_test.go):
	// 1e-5 of the gradient's largest magnitude (at least 1).
	scale := 1.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for j, v := range want {
		if diff := math.Abs(float64(l.Router.Grad[j]) - v); !(diff <= 1e-5*scale) {
			t.Errorf("router gradient[%d] = %v, want %v: |diff| = %.3g > %.3g", j, l.Router.Grad[j], v, diff, 1e-5*scale)
		}
	}
}

func iota(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// TestPredictorSendsNoGradientToTrunk checks docs/spec.md §8: the
// predictor's loss reaches the predictor's parameters and nothing else —
// not the layer input, the router or the block — in a layer and in a model.
func TestPredictorSendsNoGradientToTrunk(t *testing.T) {
	for _, causal := range []spec.CausalRouting{spec.CausalOff, spec.CausalPredictor} {
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
		cfg.Router, cfg.Aux, cfg.AuxWeight, cfg.Causal = spec.RouterLinearBias, spec.AuxPredictor, 1, causal
		mc, err := spec.NewModelConfig(10, 0, 2, cfg, spec.Pattern{Kind: spec.PatternAll}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(mc, 7)
		if err != nil {
			t.Fatal(err)
		}
		tokens, targets := ref.RandomTokens(ref.NewRand(7), 2, 8, 10)
		var tp autograd.Tape
		res, err := m.Forward(&tp, ModelInputs{Tokens: tokens, Targets: targets})
		if err != nil {
			t.Fatal(err)
		}
		// The auxiliary loss alone: the predictors' BCE.
		tp.Backward(tp.Add(res.Layers[0].AuxLoss, res.Layers[1].AuxLoss))
		for _, p := range m.Params() {
			pred := len(p.Name) > 7 && p.Name[3:7] == "Pred"
			nonzero := false
			for _, v := range p.T.Grad {
				nonzero = nonzero || v != 0
			}
			if pred && !nonzero {
				t.Errorf("causal %s: predictor parameter %s got no gradient from its loss", causal, p.Name)
			}
			if !pred && nonzero {
				t.Errorf("causal %s: the predictor's loss reached %s", causal, p.Name)
			}
		}
	}
}

// TestTrainingLossFalls trains tiny dense and MoD models for 50 AdamW steps
// on a fixed batch; the loss must fall to below 60% of its start.
func TestTrainingLossFalls(t *testing.T) {
	blk := spec.DefaultBlockConfig(16, 2, 32)
	routing := spec.DefaultConfig(blk, 0.5)
	routing.Weighting = spec.WeightSigmoid
	predictor := routing
	predictor.Aux, predictor.AuxWeight = spec.AuxPredictor, 0.1
	for _, tc := range []struct {
		name    string
		routing spec.Config
		pattern spec.Pattern
	}{
		{"dense", routing, spec.Pattern{Kind: spec.PatternList}},
		{"mod-every-other", routing, spec.Pattern{Kind: spec.PatternEveryOther}},
		{"mod-all-predictor", predictor, spec.Pattern{Kind: spec.PatternAll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc, err := spec.NewModelConfig(16, 0, 2, tc.routing, tc.pattern, nil)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewModel(mc, 1)
			if err != nil {
				t.Fatal(err)
			}
			tokens, targets := ref.RandomTokens(ref.NewRand(2), 4, 16, 16)
			opt, err := nn.NewAdamW(Tensors(m.Params()), nn.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
			if err != nil {
				t.Fatal(err)
			}
			var tp autograd.Tape
			var first, last float64
			for step := range 50 {
				tp.Reset()
				opt.ZeroGrad()
				res, err := m.Forward(&tp, ModelInputs{Tokens: tokens, Targets: targets})
				if err != nil {
					t.Fatal(err)
				}
				tp.Backward(res.Loss)
				opt.Step()
				if step == 0 {
					first = res.CE
				}
				last = res.CE
			}
			if !(last < 0.6*first) || math.IsNaN(last) {
				t.Errorf("cross-entropy %.4f after 50 steps, started at %.4f: want below 60%%", last, first)
			}
		})
	}
}
