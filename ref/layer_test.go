package ref

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// tinyLayer is a d=2 one-head layer whose block update is the causal mean of
// the gathered rows (Wq = Wk = 0, Wv = Wo = I, zero MLP), with router
// w = (0.5, -1). Its input rows have mean square 1, so N1(x) = x, and
// r = (-0.5, 1.5, 0.5, -1.5).
func tinyLayer() (spec.Config, *LayerParams, LayerInputs) {
	blk, bp := tinyBlock(0)
	cfg := spec.DefaultConfig(blk, 0.5)
	p := &LayerParams{Block: *bp, Router: []float64{0.5, -1}}
	x := mat.NewDense(4, 2, []float64{1, 1, 1, -1, -1, -1, -1, 1})
	return cfg, p, LayerInputs{X: []*mat.Dense{x}}
}

func TestLayerGatherHand(t *testing.T) {
	cfg, p, in := tinyLayer()
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "r", res.RouterWeights[0], []float64{-0.5, 1.5, 0.5, -1.5}, 0)
	if !slices.Equal(res.Selection.Rows[0], []int{1, 2}) {
		t.Fatalf("selected %v, want [1 2]", res.Selection.Rows[0])
	}
	// X~ = (x1, x2) = ((1,-1), (-1,-1)); f1 = x1, f2 = (x1+x2)/2 = (0,-1):
	// position 0 skipped the layer and is invisible to token 2.
	// out1 = x1 + 1.5 f1 = (2.5, -2.5); out2 = x2 + 0.5 f2 = (-1, -1.5).
	want := []float64{1, 1, 2.5, -2.5, -1, -1.5, -1, 1}
	assertClose(t, "out", res.Out[0].RawMatrix().Data, want, 1e-15)
	if res.Routed != 2 || res.Skipped != 2 || res.Capacity[0] != 2 || res.Selection.Count() != 2 {
		t.Errorf("routed %d skipped %d capacity %v, want 2, 2, [2]", res.Routed, res.Skipped, res.Capacity)
	}
	// router_bce with t = (0,1,1,0): BCE(z,1) = log(1+e^-z), BCE(z,0) = log(1+e^z).
	bce := (math.Log(1+math.Exp(-0.5)) + math.Log(1+math.Exp(-1.5)) + math.Log(1+math.Exp(-0.5)) + math.Log(1+math.Exp(-1.5))) / 4
	assertScalar(t, "router_bce", res.RouterBCE, bce, 1e-15)
	// Load balance with B = 1: L = S * sum_s m_s sigma(r_s) = 4 (sigma(1.5) + sigma(0.5)).
	lb := 4 * (1/(1+math.Exp(-1.5)) + 1/(1+math.Exp(-0.5)))
	assertScalar(t, "load balance", res.LoadBalance, lb, 1e-15)
	if res.AuxLoss != 0 {
		t.Errorf("AuxLoss = %v with Aux = none and no load balancing, want 0", res.AuxLoss)
	}

	cfg.Weighting = spec.WeightSigmoid
	res, _ = LayerForward(cfg, p, in)
	s15, s05 := 1/(1+math.Exp(-1.5)), 1/(1+math.Exp(-0.5))
	want = []float64{1, 1, 1 + s15, -1 - s15, -1, -1 - s05, -1, 1}
	assertClose(t, "out sigmoid", res.Out[0].RawMatrix().Data, want, 1e-15)

	// softmax over (1.5, 0.5): g1 = 1/(1+e^-1), g2 = 1/(1+e).
	cfg.Weighting = spec.WeightSoftmax
	res, _ = LayerForward(cfg, p, in)
	g1, g2 := 1/(1+math.Exp(-1)), 1/(1+math.E)
	want = []float64{1, 1, 1 + g1, -1 - g1, -1, -1 - g2, -1, 1}
	assertClose(t, "out softmax", res.Out[0].RawMatrix().Data, want, 1e-15)

	cfg.Weighting = spec.WeightNone
	res, _ = LayerForward(cfg, p, in)
	want = []float64{1, 1, 2, -2, -1, -2, -1, 1}
	assertClose(t, "out none", res.Out[0].RawMatrix().Data, want, 1e-15)
}

func TestLayerDenseStraightThroughHand(t *testing.T) {
	cfg, p, in := tinyLayer()
	cfg.Compute = spec.ComputeDense
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	// f runs on all four tokens: f1 = (x0+x1)/2 = (1,0), f2 = (x0+x1+x2)/3 = (1/3,-1/3).
	// out1 = x1 + 1.5 f1 = (2.5,-1); out2 = x2 + 0.5 f2; skipped tokens keep x.
	want := []float64{1, 1, 2.5, -1, -1 + 0.5/3, -1 - 0.5/3, -1, 1}
	assertClose(t, "out dense", res.Out[0].RawMatrix().Data, want, 1e-15)
	assertClose(t, "w = m*g", res.Multipliers[0], []float64{0, 1.5, 0.5, 0}, 0)
}

func TestLayerMLPOnlyHand(t *testing.T) {
	cfg, p, in := tinyLayer()
	cfg.MLPOnly = true
	p.Block.W1 = eye(2)
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	// Attention runs densely: x'_i = x_i + mean(x_0..x_i).
	xp := [][]float64{{2, 2}, {2, -1}, {-1 + 1.0/3, -1 - 1.0/3}, {-1, 1}}
	// The MLP (W1 = W2 = I, GELU, gamma = 1) runs on the selected 1 and 2:
	// out_i = x'_i + g_i GELU(x'_i / rms(x'_i)).
	gelu := func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }
	want := []float64{xp[0][0], xp[0][1], 0, 0, 0, 0, xp[3][0], xp[3][1]}
	for _, c := range []struct {
		i int
		g float64
	}{{1, 1.5}, {2, 0.5}} {
		u := xp[c.i]
		rms := math.Sqrt((u[0]*u[0] + u[1]*u[1]) / 2)
		want[2*c.i] = u[0] + c.g*gelu(u[0]/rms)
		want[2*c.i+1] = u[1] + c.g*gelu(u[1]/rms)
	}
	assertClose(t, "out MLP-only", res.Out[0].RawMatrix().Data, want, 1e-14)
}

func TestLayerPaddingHand(t *testing.T) {
	cfg, p, in := tinyLayer()
	in.Valid = []int{3}
	p.Router = []float64{-1, 0} // r = (-1, -1, 1, 1): the padded position 3 has the top weight
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	// k = clamp(floor(0.5*3), 1, 3) = 1: position 2 only; position 3 is padding.
	if !slices.Equal(res.Selection.Rows[0], []int{2}) {
		t.Fatalf("selected %v, want [2]", res.Selection.Rows[0])
	}
	// f2 = x2 (alone in X~), out2 = x2 + 1 * x2 = (-2,-2).
	assertClose(t, "out", res.Out[0].RawMatrix().Data, []float64{1, 1, 1, -1, -2, -2, -1, 1}, 1e-15)
	// router_bce over the 3 valid tokens: t = (0,0,1), r = (-1,-1,1): all log(1+e^-1).
	assertScalar(t, "router_bce", res.RouterBCE, math.Log(1+math.Exp(-1)), 1e-15)
}

func TestLayerErrors(t *testing.T) {
	cfg, p, in := tinyLayer()
	for _, tc := range []struct {
		mod  func(*spec.Config, *LayerParams, *LayerInputs)
		want string
	}{
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) {
			c.Weighting = spec.WeightSoftmax
			c.Causal = spec.CausalRouter
		}, "softmax"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) {
			c.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 5}
		}, "C = 5 with sequence length S = 4"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) { c.Capacity.Ratio = 0 }, "Ratio = 0"},
		{func(_ *spec.Config, _ *LayerParams, in *LayerInputs) { in.X = []*mat.Dense{mat.NewDense(4, 3, nil)} }, "4×3, want S×d = 4×2"},
		{func(_ *spec.Config, p *LayerParams, _ *LayerInputs) { p.Router = []float64{1} }, "Router has length 1, want 2"},
		{func(_ *spec.Config, p *LayerParams, _ *LayerInputs) { p.Block.Wq = nil }, "Wq is nil"},
		{func(_ *spec.Config, _ *LayerParams, in *LayerInputs) { in.Valid = []int{7} }, "valid[0] = 7"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) { c.Block.Heads = 3 }, "not a multiple of Heads = 3"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) { c.AuxWeight = 0.1 }, "Aux = none would be ignored"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) { c.Block.Heads = 2 }, "head width D/Heads = 1 is odd"},
		{func(c *spec.Config, _ *LayerParams, _ *LayerInputs) {
			c.Compute = spec.ComputeDense
			c.Causal = spec.CausalPredictor
		}, "dense compute runs f on every token"},
	} {
		c2, p2, in2 := cfg, *p, in
		tc.mod(&c2, &p2, &in2)
		if _, err := LayerForward(c2, &p2, in2); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one mentioning %q", err, tc.want)
		}
	}
}

// randomLayer draws a layer of width 8 (2 heads) and its input.
func randomLayer(seed uint64, cfg spec.Config, rows, s int) (*LayerParams, LayerInputs) {
	rng := NewRand(seed)
	p := NewLayerParams(cfg, rng)
	in := LayerInputs{}
	for b := 0; b < rows; b++ {
		in.X = append(in.X, RandomMatrix(rng, s, cfg.Block.D, 1))
	}
	if cfg.Router == spec.RouterRandom {
		in.Noise = RandomField(rng, rows, s)
	}
	if cfg.Jitter > 0 {
		in.Jitter = RandomField(rng, rows, s)
	}
	return p, in
}

// Unselected and padded rows of the output are bit-identical to the input
// (gather compute), and every row routes exactly k_b tokens.
func TestLayerSkippedBitIdenticalProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 2, 6), rapid.Float64Range(0.05, 1).Draw(t, "c"))
		cfg.Weighting = rapid.SampledFrom([]spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightSoftmax, spec.WeightNone}).Draw(t, "weighting")
		cfg.MLPOnly = false
		rows := rapid.IntRange(1, 3).Draw(t, "B")
		s := rapid.IntRange(1, 7).Draw(t, "S")
		p, in := randomLayer(rapid.Uint64().Draw(t, "seed"), cfg, rows, s)
		in.Valid = make([]int, rows)
		for b := range in.Valid {
			in.Valid[b] = rapid.IntRange(0, s).Draw(t, "V")
		}
		res, err := LayerForward(cfg, p, in)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := RowCapacities(cfg.Capacity, rows, s, in.Valid)
		for b := 0; b < rows; b++ {
			if len(res.Selection.Rows[b]) != k[b] {
				t.Fatalf("row %d routed %d, want %d", b, len(res.Selection.Rows[b]), k[b])
			}
			m := res.Selection.Mask()[b]
			for i := 0; i < s; i++ {
				if m[i] == 1 {
					continue
				}
				for j := 0; j < cfg.Block.D; j++ {
					if math.Float64bits(res.Out[b].At(i, j)) != math.Float64bits(in.X[b].At(i, j)) {
						t.Fatalf("row %d position %d (not routed) changed: %v -> %v", b, i, in.X[b].At(i, j), res.Out[b].At(i, j))
					}
				}
			}
		}
	})
}

// projectedLoss is sum over b, i, j of out[b][i][j] * proj[b][i][j] plus the
// layer's auxiliary loss: a scalar whose gradient exercises every output.
func projectedLoss(res *LayerResult, proj []*mat.Dense) float64 {
	l := res.AuxLoss
	for b, o := range res.Out {
		l += mat.Sum(mulElem(o, proj[b]))
	}
	return l
}

func mulElem(a, b *mat.Dense) *mat.Dense {
	var c mat.Dense
	c.MulElem(a, b)
	return &c
}

// The router gradient through a frozen selection has the closed form
// dL/dw = sum_i (proj_i · f_i) dg_i/dr_i x_i over the tokens whose multiplier
// carries g: the selected ones (gather) or every valid one (dense, the
// straight-through derivative 1 of docs/spec.md §7).
func TestLayerRouterGradientClosedForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*spec.Config)
	}{
		{"raw gather", func(*spec.Config) {}},
		{"sigmoid gather", func(c *spec.Config) { c.Weighting = spec.WeightSigmoid }},
		{"raw dense straight-through", func(c *spec.Config) { c.Compute = spec.ComputeDense }},
		{"sigmoid dense straight-through", func(c *spec.Config) { c.Compute = spec.ComputeDense; c.Weighting = spec.WeightSigmoid }},
		{"none", func(c *spec.Config) { c.Weighting = spec.WeightNone }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 2, 6), 0.5)
			tc.mod(&cfg)
			p, in := randomLayer(7, cfg, 2, 5)
			in.Valid = []int{5, 4}
			proj := []*mat.Dense{RandomMatrix(NewRand(8), 5, 4, 1), RandomMatrix(NewRand(9), 5, 4, 1)}
			res, err := LayerForward(cfg, p, in)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float64, 4)
			for b := range in.X {
				for i := 0; i < in.Valid[b]; i++ {
					carries := res.Selection.Mask()[b][i] == 1 || cfg.Compute == spec.ComputeDense
					if !carries {
						continue
					}
					r := res.RouterWeights[b][i]
					dg := 1.0
					switch cfg.Weighting {
					case spec.WeightSigmoid:
						dg = Sigmoid(r) * (1 - Sigmoid(r))
					case spec.WeightNone:
						dg = 0
					}
					pf := 0.0
					for j := 0; j < 4; j++ {
						pf += proj[b].At(i, j) * res.Update[b].At(i, j)
					}
					for j := 0; j < 4; j++ {
						want[j] += pf * dg * in.X[b].At(i, j)
					}
				}
			}
			got, err := FDGradient(func() (float64, error) {
				r, err := LayerForwardFrozen(cfg, p, in, res.Frozen)
				if err != nil {
					return 0, err
				}
				return projectedLoss(r, proj), nil
			}, p.Router, 0)
			if err != nil {
				t.Fatal(err)
			}
			assertClose(t, "dL/dRouter", got, want, 1e-8)
		})
	}
}

// Softmax weighting makes a past token's output depend on a later token's
// router weight with the selection held fixed; sigmoid does not (docs/spec.md
// §6). The predictor's loss does not reach X (stop-gradient, section 8).
func TestLayerGradientDependencies(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 2, 6), 0.5)
	cfg.Router = spec.RouterRandom
	cfg.Aux, cfg.AuxWeight = spec.AuxPredictor, 1
	for _, w := range []spec.Weighting{spec.WeightSoftmax, spec.WeightSigmoid} {
		cfg.Weighting = w
		p, in := randomLayer(11, cfg, 1, 6)
		res, err := LayerForward(cfg, p, in)
		if err != nil {
			t.Fatal(err)
		}
		sel := res.Selection.Rows[0]
		first, last := sel[0], sel[len(sel)-1]
		d, err := FDDerivative(func() (float64, error) {
			r, err := LayerForwardFrozen(cfg, p, in, res.Frozen)
			if err != nil {
				return 0, err
			}
			return r.Out[0].At(first, 0), nil
		}, in.Noise[0], last, 0)
		if err != nil {
			t.Fatal(err)
		}
		if (w == spec.WeightSoftmax) != (math.Abs(d) > 1e-6) {
			t.Errorf("%s: d out[%d] / d r[%d] = %v", w, first, last, d)
		}
		dq, err := FDDerivative(func() (float64, error) {
			r, err := LayerForwardFrozen(cfg, p, in, res.Frozen)
			if err != nil {
				return 0, err
			}
			return r.PredictorBCE, nil
		}, in.X[0].RawMatrix().Data, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if dq != 0 {
			t.Errorf("predictor loss reaches X through the stop-gradient: d/dx = %v", dq)
		}
	}
}

// router_bce reaches the router: dL/dw = mean over valid tokens of
// (sigma(r_i) - t_i) x_i for the linear router, with t frozen.
func TestRouterBCEGradientClosedForm(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 2, 6), 0.5)
	cfg.Aux, cfg.AuxWeight = spec.AuxRouterBCE, 1
	p, in := randomLayer(17, cfg, 2, 5)
	in.Valid = []int{5, 3}
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 4)
	for b := range in.X {
		for i := 0; i < in.Valid[b]; i++ {
			r := res.RouterWeights[b][i]
			for j := range want {
				want[j] += (1/(1+math.Exp(-r)) - res.Targets[b][i]) * in.X[b].At(i, j) / 8
			}
		}
	}
	got, err := FDGradient(func() (float64, error) {
		r, err := LayerForwardFrozen(cfg, p, in, res.Frozen)
		if err != nil {
			return 0, err
		}
		return r.RouterBCE, nil
	}, p.Router, 0)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "dBCE/dRouter", got, want, 1e-8)
}

// A hand-made selection replays through NewFrozen: selecting positions 0 and
// 3 of the tiny layer gives f0 = x0, f3 = (x0 + x3)/2 = (0, 1), with
// r = (-0.5, 1.5, 0.5, -1.5): out0 = x0 - 0.5 x0, out3 = x3 - 1.5 (0, 1).
func TestNewFrozenHandSelection(t *testing.T) {
	cfg, p, in := tinyLayer()
	sel := Selection{S: 4, Rows: [][]int{{0, 3}}}
	fz, err := NewFrozen(cfg, p, in, sel)
	if err != nil {
		t.Fatal(err)
	}
	res, err := LayerForwardFrozen(cfg, p, in, fz)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "out", res.Out[0].RawMatrix().Data, []float64{0.5, 0.5, 1, -1, -1, -1, -1, -0.5}, 1e-15)
	if _, err := NewFrozen(cfg, p, in, Selection{S: 4, Rows: [][]int{{3, 0}}}); err == nil || !strings.Contains(err.Error(), "not strictly ascending") {
		t.Errorf("descending hand selection: %v", err)
	}
}

// TestCausalTargetsAreTopK checks docs/spec.md §8 and §9 together: under
// causal routing a token is routed iff r > 0, but the auxiliary targets are
// still the top-k choice under the layer's capacity. Router weights
// (2, 1, 0.5, -3) route tokens 0, 1 and 2; capacity 0.5 of 4 makes the
// targets the top two, tokens 0 and 1.
func TestCausalTargetsAreTopK(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 1, 8), 0.5)
	cfg.Router, cfg.Causal, cfg.Aux, cfg.AuxWeight = spec.RouterRandom, spec.CausalRouter, spec.AuxRouterBCE, 1
	p := NewLayerParams(cfg, NewRand(1))
	in := LayerInputs{X: []*mat.Dense{RandomMatrix(NewRand(2), 4, 4, 1)}, Noise: [][]float64{{2, 1, 0.5, -3}}}
	res, err := LayerForward(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Selection.Rows[0]; !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("routed %v, want [0 1 2] (r > 0)", got)
	}
	if got := res.Targets[0]; !slices.Equal(got, []float64{1, 1, 0, 0}) {
		t.Errorf("targets %v, want [1 1 0 0] (top 2 of 4)", got)
	}
	// router_bce against those targets, by hand: mean of
	// softplus(-2), softplus(-1), softplus(0.5), softplus(-3).
	want := (math.Log1p(math.Exp(-2)) + math.Log1p(math.Exp(-1)) + 0.5 + math.Log1p(math.Exp(-0.5)) + math.Log1p(math.Exp(-3))) / 4
	if math.Abs(res.RouterBCE-want) > 1e-15 {
		t.Errorf("router_bce %v, want %v", res.RouterBCE, want)
	}
}
