package diagnose

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestWeightScaledIsFitted plants weight_scaled with several α on layer
// cases of each weighting and compute (and, with residual_twice, Mixture-
// of-Recursions' 0.1·σ(r) port; and with capacity_off_by_one, whose
// dropped token the fit skips) and checks that Diagnose fits α and names
// it, and that every deviation it claims has weight_scaled among its.
// Beside other deviations α is fitted against their emulation, not the
// oracle's values (fitCombined): capacity_off_by_one under softmax
// weighting renormalises over k − 1 tokens, and router_normed_input's
// weights are those of N1(x); with the oracle's, the fit missed both.
func TestWeightScaledIsFitted(t *testing.T) {
	for _, name := range []string{"layer-paper", "layer-linear-bias-sigmoid", "layer-softmax", "layer-dense-ste", "layer-mlp-only", "model-every-other"} {
		c := loadCase(t, name)
		for _, tc := range []struct {
			dev   string
			alpha float64
		}{{"weight_scaled", 0.1}, {"weight_scaled", 0.137}, {"weight_scaled", 0.5}, {"weight_scaled", 2.5}, {"residual_twice+weight_scaled", 0.1}, {"capacity_off_by_one+weight_scaled", 0.137},
			{"weight_scaled+router_normed_input", 0.137}, {"weight_mlp_only+weight_scaled+router_normed_input", 0.3}} {
			if (name == "layer-mlp-only" || name == "layer-dense-ste") && strings.Contains(tc.dev, "weight_mlp_only") {
				continue // MLP-only routing weights the MLP's update alone already; dense compute weights the whole
			}
			cand, err := DeviantCandidate(c, tc.dev, strconv.FormatFloat(tc.alpha, 'g', -1, 64))
			if err != nil {
				t.Fatalf("%s: %s α = %g: %v", name, tc.dev, tc.alpha, err)
			}
			res, err := Diagnose(c, cand)
			if err != nil {
				t.Fatalf("%s: %s α = %g: %v", name, tc.dev, tc.alpha, err)
			}
			found := false
			for _, r := range res[1:] {
				if !r.Match || !r.Distinct {
					continue
				}
				if !slices.Contains(strings.Split(r.Name, "+"), "weight_scaled") {
					t.Errorf("%s: %s α = %g: claims %s, which has no weight_scaled", name, tc.dev, tc.alpha, r.Name)
					continue
				}
				if math.Abs(r.Scale-tc.alpha) > 1e-9*tc.alpha {
					t.Errorf("%s: %s α = %g: claims %s with α = %v", name, tc.dev, tc.alpha, r.Name, r.Scale)
				}
				found = found || r.Name == tc.dev
			}
			if !found {
				t.Errorf("%s: %s α = %g: not named", name, tc.dev, tc.alpha)
			}
		}
	}
}

// TestWeightScaledOneIsNotClaimed: α = 1 is no scale. A candidate with
// α = 1 (the oracle's values) is never told its weight is scaled: the fit
// lands within unscaledBand of 1 and weight_scaled is not emulated, with
// that reason; one with another deviation and the right weight is not
// matched by weight_scaled alone or in a combination (its fit, where
// the other deviation moves the weights, is judged and fails).
func TestWeightScaledOneIsNotClaimed(t *testing.T) {
	c := loadCase(t, "layer-paper")
	for _, tc := range []struct{ dev, variant string }{{"weight_scaled", "1"}, {"residual_twice", ""}, {"rope_gathered_indices", ""}, {"capacity_off_by_one", ""}} {
		cand, err := DeviantCandidate(c, tc.dev, tc.variant)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if !slices.Contains(strings.Split(r.Name, "+"), "weight_scaled") {
				continue
			}
			if r.Match {
				t.Errorf("%s: %s matches with α = %v", tc.dev, r.Name, r.Scale)
			}
			if r.Name == "weight_scaled" && tc.dev == "weight_scaled" && (r.Emulated || !strings.Contains(r.Reason, "not scaled")) {
				t.Errorf("α = 1: weight_scaled emulated %t, reason %q; want it refused as within the band of 1", r.Emulated, r.Reason)
			}
		}
	}
}

// TestWeightScaledFitsFromOut: a candidate that leaves out its weights and
// multipliers has α fitted from its output's update, out − x.
func TestWeightScaledFitsFromOut(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand, err := DeviantCandidate(c, "weight_scaled", "0.25")
	if err != nil {
		t.Fatal(err)
	}
	delete(cand, "weights")
	delete(cand, "multipliers")
	res, err := DiagnoseWithOptions(c, cand, DiagnoseOptions{AllowMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res, func(r DeviationResult) bool { return r.Name == "weight_scaled" })
	if i < 0 || !res[i].Match || !res[i].Distinct || math.Abs(res[i].Scale-0.25) > 1e-9 {
		t.Fatalf("weight_scaled from out alone: %+v", res[max(i, 0)])
	}
}

// TestWeightScaledNeedsArraysToFit: a model case whose candidate writes no
// routed layer's arrays has nothing to fit α to, and weight_scaled is not
// emulated.
func TestWeightScaledNeedsArraysToFit(t *testing.T) {
	c := loadCase(t, "model-every-other")
	cand, err := DeviantCandidate(c, "weight_scaled", "0.2")
	if err != nil {
		t.Fatal(err)
	}
	ems, _, err := modelEmulations(c, writtenByLayer(c, cand))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ems, func(em emulation) bool { return em.name == "weight_scaled" })
	if i < 0 {
		t.Fatal("no emulation of weight_scaled")
	}
	em := ems[i]
	for _, info := range c.Manifest.Arrays {
		if strings.HasSuffix(info.Name, "multipliers") || strings.HasSuffix(info.Name, "weights") {
			if em.reason != "" || math.Abs(em.scale-0.2) > 1e-9 {
				t.Errorf("the case has %s, and weight_scaled was not fitted to 0.2: %q α = %v", info.Name, em.reason, em.scale)
			}
			return
		}
	}
	if !strings.Contains(em.reason, "to fit α to") {
		t.Errorf("weight_scaled on a model case without per-layer arrays: reason %q", em.reason)
	}
}
