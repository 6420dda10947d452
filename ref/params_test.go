package ref

import (
	"slices"
	"testing"

	"github.com/modref/modref/spec"
)

// TestNewLayerParamsWithoutRand checks that a nil generator gives the
// drawn parameters' names and shapes with each at its distribution's mean:
// the norms' gains 1, every other value 0.
func TestNewLayerParamsWithoutRand(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	cfg.Block.Norm, cfg.Block.QKVBias, cfg.Router = spec.NormLayer, true, spec.RouterLinearBias
	drawn, zero := NewLayerParams(cfg, NewRand(1)).Tensors(""), NewLayerParams(cfg, nil).Tensors("")
	if len(drawn) != len(zero) {
		t.Fatalf("%d tensors without a generator, %d drawn", len(zero), len(drawn))
	}
	for i, z := range zero {
		if z.Name != drawn[i].Name || !slices.Equal(z.Shape, drawn[i].Shape) {
			t.Fatalf("tensor %d: %s %v without a generator, %s %v drawn", i, z.Name, z.Shape, drawn[i].Name, drawn[i].Shape)
		}
		want := 0.0
		if z.Name == "Norm1" || z.Name == "Norm2" {
			want = 1
		}
		for j, v := range z.Data {
			if v != want {
				t.Fatalf("%s[%d] = %v without a generator, want %v", z.Name, j, v, want)
			}
		}
	}
}
