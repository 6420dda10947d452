package diagnose

import (
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// TestMeasuredCatchesSkipGradientsSafely checks that MeasuredCatches,
// which takes a deviation's gradients only where its forward arrays pass,
// measures what judging every deviation's whole recomputed case measures,
// on layer cases of every routing (top-k, causal by router and by
// predictor, padded rows, MLP-only, a window, dense compute), and that
// it did skip gradients somewhere.
func TestMeasuredCatchesSkipGradientsSafely(t *testing.T) {
	skipped := 0
	for _, name := range []string{"layer-paper", "layer-padding-load-balance", "layer-causal-router", "layer-causal-predictor", "layer-mlp-only", "layer-window", "layer-dense-ste", "layer-gqa"} {
		c := measuredAsWhole(t, name)
		_, caught, err := emulateLayer(c, nil, nil, true, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range caught {
			if f.byForward {
				skipped++
			}
		}
	}
	if skipped == 0 {
		t.Error("no deviation was caught by its forward arrays alone: the gradients were never skipped")
	}
}

// TestMeasuredModelCatchesSkipGradientsSafely is
// TestMeasuredCatchesSkipGradientsSafely on model cases (two routed layers
// and more, padding, the random router, the predictor, MLP-only, shared
// capacities and a case with ties) and decode cases (padding, a window,
// the predictor, MLP-only): MeasuredCatches, which takes a model
// deviation's gradients, and decodes under a decode case's layer
// deviation, only where the forward arrays pass, decodes only until the
// tokens decoded fail, and judges each emulation as it is computed,
// measures what judging every deviation's whole recomputed case measures,
// and it did skip gradients, decoding under a layer deviation and the
// rest of a decode_mismatch variant's decoding somewhere.
func TestMeasuredModelCatchesSkipGradientsSafely(t *testing.T) {
	skipped := map[string]int{}
	for _, name := range []string{"model-every-other", "model-batch-rows", "model-random", "model-predictor", "model-mlp-only", "model-mixed-capacities", "model-ties", "model-gqa",
		"decode-padding", "decode-window", "decode-predictor", "decode-mlp-only", "decode-layer-list", "decode-batch-rows"} {
		c := measuredAsWhole(t, name)
		kind := c.Manifest.Kind
		if kind == format.KindDecode {
			ems, compute, err := decodeEmulations(c)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ems {
				if ems[i].reason != "" {
					continue
				}
				caught := new(forwardCatch)
				if _, err := compute(i, caught); err != nil {
					t.Fatal(err)
				}
				if caught.byForward {
					skipped[kind]++
					if ems[i].variant != "" {
						skipped["decode_mismatch variant"]++
					}
				}
			}
			continue
		}
		ems, devs, err := modelEmulations(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range devs {
			if ems[i].reason != "" || ems[i].arrays != nil || ems[i].repeats > 0 || !devs[i].hasBackward() {
				continue
			}
			devs[i].caught = new(forwardCatch)
			if _, err := modelArrays(c, modelSpecOf(c), &devs[i]); err != nil {
				t.Fatal(err)
			}
			if devs[i].caught.byForward {
				skipped[kind]++
			}
		}
	}
	for _, kind := range []string{format.KindModel, format.KindDecode, "decode_mismatch variant"} {
		if skipped[kind] == 0 {
			t.Errorf("no %s was caught by its forward arrays or first decoded tokens alone: the rest was never skipped", kind)
		}
	}
}

// measuredAsWhole loads corpus case name and checks that MeasuredCatches
// gives what judging every emulated deviation's whole recomputed case
// gives.
func measuredAsWhole(t *testing.T, name string) *format.Case {
	t.Helper()
	c, err := format.Load("../corpus", name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MeasuredCatches(c)
	if err != nil {
		t.Fatal(err)
	}
	ems, err := emulate(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, em := range ems {
		if em.reason != "" || slices.Contains(want, em.name) {
			continue
		}
		dc, err := deviantCase(c, em)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := judge.Compare(c, dc.Candidate(), false); err != nil {
			t.Fatal(err)
		} else if !res.Pass {
			want = append(want, em.name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: MeasuredCatches gives %v, judging every whole case %v", name, got, want)
	}
	return c
}

// TestComputedCatchesAreMeasured: on every layer and model case of the
// corpus, each claim of softmax_whole_row, qk_swapped, weight_scaled and
// router_normed_input
// (ComputedCatches' rules) is true: the case recomputed under the
// deviation (weight_scaled at its α of 0.1) fails the case's comparison.
func TestComputedCatchesAreMeasured(t *testing.T) {
	names, err := format.List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, name := range names {
		c, err := format.Load("../corpus", name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Manifest.Kind != format.KindLayer && c.Manifest.Kind != format.KindModel {
			continue
		}
		for _, dev := range []string{"softmax_whole_row", "qk_swapped", "weight_scaled", "router_normed_input"} {
			if !slices.Contains(c.Manifest.Catches, dev) {
				continue
			}
			claims++
			cand, err := combinedCandidate(c, dev, "")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if res, err := judge.Compare(c, cand, false); err != nil {
				t.Fatal(err)
			} else if res.Pass {
				t.Errorf("%s claims %s, and passes under it", name, dev)
			}
		}
	}
	if claims == 0 {
		t.Error("no case claims softmax_whole_row, qk_swapped or weight_scaled")
	}
}

// TestDiagnoseLayerStreamed checks that judging each emulation of a layer
// case as soon as it is computed (diagnoseLayer, which drops its arrays)
// gives what judging every kept emulation gives (diagnoseWith), for a
// candidate of each deviation the case's emulations compute, with what
// it wrote.
func TestDiagnoseLayerStreamed(t *testing.T) {
	for _, name := range []string{"layer-paper", "layer-window", "layer-losses-sigmoid"} {
		c := loadCase(t, name)
		for _, em := range emulated(t, c) {
			if em.reason != "" || em.repeats > 0 {
				continue
			}
			dc, err := deviantCase(c, em)
			if err != nil {
				t.Fatal(err)
			}
			cand := dc.Candidate()
			w := writtenByLayer(c, cand)
			ems, err := emulate(c, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := diagnoseWith(c, cand, ems)
			if err != nil {
				t.Fatal(err)
			}
			got, err := diagnoseLayer(c, cand, w, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s, candidate %s: %d results streamed, %d kept", name, em.name, len(got), len(want))
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("%s, candidate %s: result %d streamed %s %s distinct %v match %v %d/%d, kept %s %s distinct %v match %v %d/%d", name, em.name, i,
						got[i].Name, got[i].Variant, got[i].Distinct, got[i].Match, got[i].Matching, got[i].Total,
						want[i].Name, want[i].Variant, want[i].Distinct, want[i].Match, want[i].Matching, want[i].Total)
				}
			}
		}
	}
}

// TestMeasuredCatchesIndependentOfGOMAXPROCS measures the catches of model
// and decode cases, whose emulations run side by side and are judged as
// each finishes, on one core and on four, and finds the same lists.
func TestMeasuredCatchesIndependentOfGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, name := range []string{"model-every-other", "model-batch-rows", "decode-padding", "decode-window"} {
		c, err := format.Load("../corpus", name)
		if err != nil {
			t.Fatal(err)
		}
		var got [2][]string
		for k, procs := range []int{1, 4} {
			runtime.GOMAXPROCS(procs)
			if got[k], err = MeasuredCatches(c); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got[0], got[1]) || len(got[0]) == 0 {
			t.Errorf("%s: catches %v on one core, %v on four", name, got[0], got[1])
		}
	}
}
