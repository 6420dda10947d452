package diagnose

import (
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
		_, caught, err := emulateLayer(c, nil, nil, true)
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
