package main

import (
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestWithNoise: the deviant arrays gain the emulation's error against the
// truth, element by element, and only where the three arrays agree in
// shape; without an emulation (the manifests' tolerances) they are as
// given.
func TestWithNoise(t *testing.T) {
	c := &format.Case{Manifest: &format.Manifest{}, Arrays: map[string]*format.Array{
		"expected.out":  format.Float([]float64{1, 2}, 2),
		"expected.loss": format.Float([]float64{3}, 1),
	}}
	dv := map[string]*format.Array{
		"out":  format.Float([]float64{10, 20}, 2),
		"loss": format.Float([]float64{30}, 1),
	}
	base := map[string]*format.Array{
		"out":  format.Float([]float64{1.5, 1.75}, 2),
		"loss": format.Float([]float64{3, 3}, 2), // another shape: no noise
	}
	got := withNoise(c, dv, base)
	if want := []float64{10.5, 19.75}; !slices.Equal(got["out"].F, want) {
		t.Errorf("out with noise = %v, want %v", got["out"].F, want)
	}
	if got["loss"] != dv["loss"] {
		t.Errorf("loss, whose emulation has another shape, = %v, want the deviant's %v", got["loss"].F, dv["loss"].F)
	}
	if dv["out"].F[0] != 10 {
		t.Errorf("withNoise changed the deviant's array: %v", dv["out"].F)
	}
	for name, a := range withNoise(c, dv, nil) {
		if a != dv[name] {
			t.Errorf("%s without an emulation = %v, want the deviant's %v", name, a.F, dv[name].F)
		}
	}
}

// TestSmaller: diagnose runs on a layer case before any other, then on
// the one with the fewest tokens.
func TestSmaller(t *testing.T) {
	mk := func(kind string, b, s int) *format.Case {
		m := &format.Manifest{Kind: kind}
		m.Config.Batch, m.Config.SeqLen = b, s
		return &format.Case{Manifest: m}
	}
	bigLayer, smallModel := mk(format.KindLayer, 4, 100), mk(format.KindModel, 1, 2)
	if !smaller(bigLayer, smallModel) || smaller(smallModel, bigLayer) {
		t.Error("a layer case does not come before a smaller model case")
	}
	if !smaller(mk(format.KindLayer, 2, 8), bigLayer) || smaller(bigLayer, mk(format.KindLayer, 2, 8)) {
		t.Error("of two layer cases, the one with fewer tokens does not come first")
	}
}
