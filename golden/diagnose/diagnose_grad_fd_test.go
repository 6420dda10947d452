//go:build !amd64.v3

// The GOAMD64=v3 and v4 runs of .ci/run (build tag amd64.v3) are about
// bits; these tests compare with tolerances, and their finite differences
// take minutes of CPU, so they run once, in the default build, and only
// with -long (long_test.go), which .ci/run sets.

package diagnose

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
)

// TestAnalyticDeviantGradientsAreTheFiniteDifferences holds every deviant
// layer's backward pass (diagnose_grad.go) to the finite differences of
// its forward (run): on every layer and model case of the corpus, for
// every deviation emulated on it, the arrays layerArraysAnalytic and
// modelArraysAnalytic compute equal layerArraysFD's and modelArraysFD's,
// and on every mode case modeArrays's (mode_ungated_experts by
// ungatedBackward) equal modeArraysFD's,
// forward values within deviantValueTol and gradients within
// deviantGradTol, each relative to max(‖e‖∞, 1); and every deviation of
// backwardNames is compared on some case.
func TestAnalyticDeviantGradientsAreTheFiniteDifferences(t *testing.T) {
	if !*long {
		t.Skip("finite differences of every deviation on every layer and model case (with the combinations, about 4 minutes of CPU): -long runs them (.ci/run does)")
	}
	names, err := format.List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	worst := map[string]float64{}
	cases, ran := 0, 0 // layer and model cases, and those whose subtest ran
	t.Cleanup(func() {
		t.Logf("largest differences relative to max(‖e‖∞, 1): %v", worst)
		if ran < cases {
			return // -run chose some cases
		}
		for n := range backwardNames {
			if _, ok := worst[n+" gradients"]; !ok {
				t.Errorf("%s: has a backward pass, compared on none of the corpus's layer and model cases", n)
			}
		}
		if _, ok := worst["mode_ungated_experts gradients"]; !ok {
			t.Errorf("mode_ungated_experts: compared on none of the corpus's mode cases")
		}
	})
	for _, name := range names {
		if !strings.HasPrefix(name, "layer-") && !strings.HasPrefix(name, "model-") {
			continue
		}
		cases++
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mu.Lock()
			ran++
			mu.Unlock()
			analyticEqualsFD(t, name, &mu, worst)
		})
	}
}

// analyticEqualsFD is TestAnalyticDeviantGradientsAreTheFiniteDifferences
// on case name, recording the largest differences in worst.
func analyticEqualsFD(t *testing.T, name string, mu *sync.Mutex, worst map[string]float64) {
	c := loadCase(t, name)
	var ems []emulation
	var devs []layerDeviation
	var err error
	switch c.Manifest.Kind {
	case format.KindLayer:
		ems, devs, err = layerEmulations(c, nil)
	case format.KindModel:
		ems, devs, err = modelEmulations(c, nil)
	case format.KindMoDE:
		s := modeSpecOf(c)
		got, gerr := modeArrays(c, s, "mode_ungated_experts")
		want, werr := modeArraysFD(c, s)
		if gerr != nil || werr != nil {
			t.Fatalf("%s: mode_ungated_experts: analytic: %v; finite differences: %v", name, gerr, werr)
		}
		compareDeviant(t, c, name+": mode_ungated_experts", "mode_ungated_experts", got, want, mu, worst)
		return
	default:
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for i, em := range ems {
		d := &devs[i]
		if em.reason != "" || em.arrays != nil || !d.hasBackward() {
			continue
		}
		var got, want map[string]*format.Array
		var gerr, werr error
		if c.Manifest.Kind == format.KindLayer {
			s := layerSpecOf(c)
			got, gerr = layerArraysAnalytic(c, s, d)
			want, werr = layerArraysFD(c, s, d)
		} else {
			s := modelSpecOf(c)
			got, gerr = modelArraysAnalytic(c, s, d)
			want, werr = modelArraysFD(c, s, d)
		}
		if gerr != nil || werr != nil {
			t.Fatalf("%s: %s: analytic: %v; finite differences: %v", name, d.name, gerr, werr)
		}
		if _, ok := fineInputGradients[name+" "+d.name]; ok {
			want["grad.input.x"] = fineInputGradient(t, c, d, 1e-7)
		}
		label := fmt.Sprintf("%s: %s%s", name, d.name, map[bool]string{true: " (torch order)"}[d.torchTopK])
		compareDeviant(t, c, label, d.name, got, want, mu, worst)
	}
}

// fineInputGradients are the cases and deviations whose grad.input.x the
// central differences at ref.FDStep miss by more than deviantGradTol, and
// why: analyticEqualsFD takes them at a step of 1e-7 (fineInputGradient).
var fineInputGradients = map[string]string{
	"layer-causal-threshold router_normed_input": "a row of each batch row's input is 0, where N1(x) = x·γ·(Σx²/d + ε)^(−1/2) bends on the scale √ε = 1e-3, and the router reads it: at ref.FDStep, grad.input.x[0 1 0] is 2.7516634, at h = 1e-6 2.7516753, at 1e-7 2.7516754, the backward pass's 2.7516754 (measured 2026-11-27)",
}

// fineInputGradient is grad.input.x of layer case c under d by central
// differences at step h.
func fineInputGradient(t *testing.T, c *format.Case, d *layerDeviation, h float64) *format.Array {
	t.Helper()
	s := layerSpecOf(c)
	dr, st, _, err := layerForwardOf(c, s, d)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() (float64, error) {
		l, err := d.run(s.Config, dr.P, dr.In, st)
		if err != nil {
			return 0, err
		}
		return oracle.Dot(l.out, dr.U) + l.res.AuxLoss, nil
	}
	var g []float64
	for _, x := range dr.In.X {
		rows, cols := x.Dims()
		for i := range rows {
			row := x.RawRowView(i)
			for j := range cols {
				v, err := ref.FDDerivative(loss, row, j, h)
				if err != nil {
					t.Fatal(err)
				}
				g = append(g, v)
			}
		}
	}
	return format.Float(g, s.Batch, s.SeqLen, s.Config.Block.D)
}

// compareDeviant compares the expected arrays of case c computed by the
// backward passes (got) with those of the finite differences (want) for
// the deviation named dev, recording the largest differences in worst, by
// kind ("values", "gradients") and by dev and kind.
func compareDeviant(t *testing.T, c *format.Case, label, dev string, got, want map[string]*format.Array, mu *sync.Mutex, worst map[string]float64) {
	t.Helper()
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		g, w := got[info.Name], want[info.Name]
		if g == nil || w == nil {
			t.Errorf("%s: %s not computed by both", label, info.Name)
			continue
		}
		tol, kind := deviantValueTol, "values"
		if strings.HasPrefix(info.Name, "grad.") {
			tol, kind = deviantGradTol, "gradients"
		}
		scale := math.Max(1, maxAbs(w.F))
		for k := range w.F {
			diff := math.Abs(g.F[k]-w.F[k]) / scale
			mu.Lock()
			worst[kind] = math.Max(worst[kind], diff)
			worst[dev+" "+kind] = math.Max(worst[dev+" "+kind], diff)
			mu.Unlock()
			if !(diff <= tol) {
				t.Errorf("%s: %s%v = %v by the backward pass, %v by finite differences (difference %.3g of max(‖e‖∞, 1) = %.3g, bound %.3g)",
					label, info.Name, w.Index(k), g.F[k], w.F[k], g.F[k]-w.F[k], scale, tol)
				break
			}
		}
		for k := range w.I {
			if g.I[k] != w.I[k] {
				t.Errorf("%s: %s%v = %v by the backward pass, %v by finite differences", label, info.Name, w.Index(k), g.I[k], w.I[k])
				break
			}
		}
	}
}

// deviantValueTol and deviantGradTol bound the differences between the
// backward passes' arrays and the finite differences', relative to
// max(‖e‖∞, 1) (docs/tolerances.md). The values differ only by the
// order of their sums (a block regathered in matrix form by ref.BlockPass
// against token by token through ref.KVCache, with RoPE applied to the
// rotated weights): measured ≤ MEASURED. The gradients differ by the
// central differences' truncation and rounding at ref.FDStep: measured ≤
// MEASURED.
const (
	deviantValueTol = 1e-13
	deviantGradTol  = 2e-7
)

// TestAnalyticCombinationsAreTheFiniteDifferences is
// TestAnalyticDeviantGradientsAreTheFiniteDifferences for deviations
// combined (combineNames), where the output formulas, the regathered
// blocks and the changed decisions meet: the combinations .ci/run plants,
// and others that put each output formula with a regathered block, on the
// cases where each can be emulated.
func TestAnalyticCombinationsAreTheFiniteDifferences(t *testing.T) {
	if !*long {
		t.Skip("finite differences of combined deviations on several cases (with every deviation on every case, about 4 minutes of CPU): -long runs them (.ci/run does)")
	}
	combos := []string{
		"residual_twice+unsorted_indices",
		"rope_gathered_indices+targets_first_row",
		"residual_twice+rope_gathered_indices+weight_mlp_only",
		"residual_scaled+capacity_off_by_one+no_causal_mask",
		"residual_twice+rope_gathered_indices+weight_mlp_only+gather_first_k",
		"residual_twice+rope_gathered_indices+weight_mlp_only+shared_router",
		"no_weighting+gather_first_k",
		"residual_scaled+gather_first_k",
		"no_weighting+window_gathered_indices",
		"residual_twice+predictor_no_stopgrad",
		"ste_m_plus_1+capacity_off_by_one",
		"residual_scaled+capacity_floor_zero",
		"tanh_gate+skipped_scaled",
		"tanh_gate+residual_twice+no_causal_mask",
		"skipped_scaled+residual_scaled+unsorted_indices",
		"skipped_scaled+aux_over_padding+predictor_no_stopgrad",
		"tanh_gate+aux_over_padding+targets_first_row",
		"weight_mlp_only+tanh_gate",
		"residual_twice+weight_mlp_only+tanh_gate+skipped_scaled",
		"weight_mlp_only+softmax_whole_row",
		"residual_twice+rope_gathered_indices+softmax_whole_row",
		"residual_twice+weight_scaled",
		"weight_mlp_only+skipped_scaled+weight_scaled",
		"residual_scaled+gather_first_k+weight_scaled",
		"rope_gathered_indices+weight_mlp_only+router_normed_input",
		"tanh_gate+skipped_scaled+router_normed_input",
		"residual_twice+weight_scaled+router_normed_input",
		"shared_router+router_normed_input",
	}
	var mu sync.Mutex
	worst := map[string]float64{}
	compared := map[string]int{}
	t.Cleanup(func() {
		t.Logf("largest differences relative to max(‖e‖∞, 1): %v", worst)
		for _, combo := range combos {
			if compared[combo] == 0 {
				t.Errorf("%s: emulated on none of the cases", combo)
			}
		}
	})
	for _, name := range []string{"layer-paper", "layer-integer-capacity", "layer-predictor", "layer-dense-ste", "layer-window", "layer-short-row", "layer-padding", "layer-softmax-losses", "model-every-other"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := loadCase(t, name)
			for _, combo := range combos {
				d, ok := combineNames(strings.Split(combo, "+"))
				if !ok {
					t.Fatalf("%s: not combinable", combo)
				}
				var got, want map[string]*format.Array
				var gerr, werr error
				if c.Manifest.Kind == format.KindLayer {
					s := layerSpecOf(c)
					if d.sharedRouter || d.skip(s.Config) != "" {
						continue
					}
					got, gerr = layerArraysAnalytic(c, s, &d)
					want, werr = layerArraysFD(c, s, &d)
				} else {
					s := modelSpecOf(c)
					if skipModel(s.Config, d) != "" {
						continue
					}
					got, gerr = modelArraysAnalytic(c, s, &d)
					want, werr = modelArraysFD(c, s, &d)
				}
				if gerr != nil || werr != nil {
					t.Fatalf("%s: analytic: %v; finite differences: %v", combo, gerr, werr)
				}
				compareDeviant(t, c, name+": "+combo, combo, got, want, &mu, worst)
				mu.Lock()
				compared[combo]++
				mu.Unlock()
			}
		})
	}
}
