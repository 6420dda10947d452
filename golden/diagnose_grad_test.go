package golden

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/spec"
)

// TestRefuseFD checks the way of a deviation without a backward pass: on a
// case within maxFDWork it is emulated (by finite differences), on a larger
// one it is not, with a reason that says why; a deviation with a backward
// pass is emulated on both.
func TestRefuseFD(t *testing.T) {
	raw, err := os.ReadFile("testdata/genmatrix/matrix-layer-h16-s113.json")
	if err != nil {
		t.Fatal(err)
	}
	g, err := DecodeGenConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	big, err := generateCase(g)
	if err != nil {
		t.Fatal(err)
	}
	twice, _ := findLayerDeviation("residual_twice")
	for _, c := range []struct {
		c       *format.Case
		refused bool
	}{{loadCase(t, "layer-paper"), false}, {big, true}} {
		if w := format.FDWork(c.c.Manifest); (w > format.MaxFDWork) != c.refused {
			t.Fatalf("%s: finite differences take %.3g multiply-adds: the case does not test what it should", c.c.Manifest.Name, w)
		}
		devs := []layerDeviation{{name: "unlisted_deviation"}, twice}
		ems := []emulation{{name: devs[0].name}, {name: devs[1].name}}
		refuseFD(c.c, devs, ems)
		if got := ems[0].reason != ""; got != c.refused {
			t.Errorf("%s: a deviation without a backward pass refused: %v, want %v (reason %q)", c.c.Manifest.Name, got, c.refused, ems[0].reason)
		}
		if c.refused && !strings.Contains(ems[0].reason, "no backward pass yet") {
			t.Errorf("%s: reason %q does not say why", c.c.Manifest.Name, ems[0].reason)
		}
		if ems[1].reason != "" {
			t.Errorf("%s: residual_twice refused: %s", c.c.Manifest.Name, ems[1].reason)
		}
	}
}

// TestGenSeparatesLongSequences checks gen at a long sequence, where
// hardly any draw keeps the routing clear of the margin: the case is made
// from the first draw with its routing moved apart (separateRouting), every
// gap at least minCaseGap, under top-k routing with each router that has
// an input to move and under causal routing by the router; under causal
// routing by the predictor it is refused, with the reason.
func TestGenSeparatesLongSequences(t *testing.T) {
	for _, c := range []struct {
		router spec.RouterKind
		causal spec.CausalRouting
		ok     bool
	}{
		{spec.RouterLinear, spec.CausalOff, true},
		{spec.RouterLinearBias, spec.CausalOff, true},
		{spec.RouterL2Norm, spec.CausalOff, true},
		{spec.RouterRandom, spec.CausalOff, true},
		{spec.RouterLinear, spec.CausalRouter, true},
		{spec.RouterLinear, spec.CausalPredictor, false},
	} {
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.25)
		cfg.Router, cfg.Causal = c.router, c.causal
		if c.causal != spec.CausalOff {
			cfg.Weighting, cfg.Aux, cfg.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1
			if c.causal == spec.CausalPredictor {
				cfg.Aux = spec.AuxPredictor
			}
		}
		s := oracle.LayerSpec{Name: "long", Seed: 1, Batch: 2, SeqLen: 2048, Valid: []int{2048, 1031}, Config: cfg}
		kase, err := genLayer(s)
		name := fmt.Sprintf("%s router, causal %s", c.router, c.causal)
		if !c.ok {
			if err == nil || !strings.Contains(err.Error(), "no draw in 100") {
				t.Errorf("%s: error %v, want one saying no draw is clear", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if seed := kase.Manifest.Provenance.Seed; seed != 1 {
			t.Errorf("%s: the case is the draw of seed %d, want the first (1), separated", name, seed)
		}
		for _, row := range kase.Manifest.Routing.Gaps[0] {
			if row >= 0 && row < oracle.MinCaseGap {
				t.Errorf("%s: gaps %v, want each at least %v", name, kase.Manifest.Routing.Gaps[0], oracle.MinCaseGap)
				break
			}
		}
	}
}
