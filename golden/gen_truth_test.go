package golden

import (
	"math"
	"slices"
	"testing"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/oracle"
)

// TestCatchesFromGeneratorsTruth measures a generated layer case's
// catches twice: from the forward pass the generator kept
// (diagnose.MeasuredLayerCatches, what gen --config does) and from ref's
// forward computed again from the case's arrays (diagnose.MeasuredCatches):
// the same deviations are caught, and the generator's truth is that of the
// case it wrote (its output is the case's expected.out, bit for bit).
// The emulations read the case's parameters and inputs in place
// (oracle.LayerDrawViewOf): measuring leaves every array as it was.
func TestCatchesFromGeneratorsTruth(t *testing.T) {
	cfg := smallRoutedLayer()
	g := &GenConfig{Name: "truth", Kind: "layer", Seed: 1}
	g.Config.Batch, g.Config.SeqLen, g.Config.ValidLengths, g.Config.Layer = 2, 96, []int{96, 51}, &cfg
	c, truth, err := generateCaseTruth(g)
	if err != nil {
		t.Fatal(err)
	}
	if truth == nil {
		t.Fatal("no truth kept for a layer case")
	}
	out := oracle.BatchArray(truth.Out)
	if want := c.Arrays["expected.out"]; !slices.Equal(out.F, want.F) {
		t.Error("the kept truth's output is not the case's expected.out")
	}
	before := make(map[string][]float64)
	for name, a := range c.Arrays {
		before[name] = slices.Clone(a.F)
	}
	from, err := diagnose.MeasuredLayerCatches(c, truth)
	if err != nil {
		t.Fatal(err)
	}
	again, err := diagnose.MeasuredCatches(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) == 0 || !slices.Equal(from, again) {
		t.Errorf("catches %v from the generator's truth, %v from ref's forward again", from, again)
	}
	for name, a := range c.Arrays {
		for i, v := range a.F {
			if w := before[name][i]; math.Float64bits(v) != math.Float64bits(w) {
				t.Errorf("measuring the catches changed the case's %s at flat index %d from %v to %v", name, i, w, v)
				break
			}
		}
	}
}
