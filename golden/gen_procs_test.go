package golden

import (
	"runtime"
	"slices"
	"testing"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/spec"
)

// TestGenIndependentOfGOMAXPROCS generates a layer case whose products are
// split between goroutines, whose redraws are drawn ahead on another core
// (its fourth draw is the first clear one) and whose catches are measured
// by emulations run side by side (gen --config's work) on one core and on
// four: every array has the same bits and the catches are the same.
func TestGenIndependentOfGOMAXPROCS(t *testing.T) {
	cfg := smallRoutedLayer()
	s := oracle.LayerSpec{Name: "procs", Seed: 1, Batch: 2, SeqLen: 128, Valid: []int{128, 67}, Config: cfg}
	g := &GenConfig{Name: s.Name, Kind: "layer", Seed: 1}
	g.Config.Batch, g.Config.SeqLen, g.Config.ValidLengths, g.Config.Layer = s.Batch, s.SeqLen, s.Valid, &cfg
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	one, err := GenerateFromConfig(g, modcase.Float32Tolerances)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(4)
	four, err := GenerateFromConfig(g, modcase.Float32Tolerances)
	if err != nil {
		t.Fatal(err)
	}
	if seed := four.Manifest.Provenance.Seed; seed < 3 {
		t.Errorf("the case is the draw of seed %d: no redraw was made ahead on another core", seed)
	}
	sameBits(t, s.Name, "on one core", one, "on four", four)
	if !slices.Equal(one.Manifest.Catches, four.Manifest.Catches) || len(one.Manifest.Catches) == 0 {
		t.Errorf("catches %v on one core, %v on four", one.Manifest.Catches, four.Manifest.Catches)
	}
}

// smallRoutedLayer is a layer at d = 64 routed at 25 % capacity with
// sigmoid weights and the router's BCE loss: every deviation of a layer
// case applies to it, and gen --config makes it in a fraction of a second.
func smallRoutedLayer() spec.Config {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(64, 4, 128), 0.25)
	cfg.Weighting, cfg.Aux, cfg.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.01
	return cfg
}
