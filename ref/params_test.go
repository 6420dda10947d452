package ref

import (
	"errors"
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

// TestLayerParamsOverUsesTheStorage checks that LayerParamsOver builds
// every parameter over the slice it is given for that name, with the
// names and shapes NewLayerParams draws, and refuses a missing or
// mis-sized one.
func TestLayerParamsOverUsesTheStorage(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	cfg.Block.Norm, cfg.Block.QKVBias, cfg.Block.MLP, cfg.Block.KVHeads = spec.NormLayer, true, spec.ActSwiGLU, 1
	cfg.Router, cfg.Aux = spec.RouterLinearBias, spec.AuxPredictor
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	drawn := NewLayerParams(cfg, NewRand(1)).Tensors("")
	byName := make(map[string][]float64)
	for _, d := range drawn {
		byName[d.Name] = d.Data
	}
	view := func(name string, n int) ([]float64, error) { return byName[name], nil }
	p, err := LayerParamsOver(cfg, view)
	if err != nil {
		t.Fatal(err)
	}
	over := p.Tensors("")
	if len(over) != len(drawn) {
		t.Fatalf("%d tensors over the storage, %d drawn", len(over), len(drawn))
	}
	for i, o := range over {
		d := drawn[i]
		if o.Name != d.Name || !slices.Equal(o.Shape, d.Shape) {
			t.Fatalf("tensor %d: %s %v over the storage, %s %v drawn", i, o.Name, o.Shape, d.Name, d.Shape)
		}
		if &o.Data[0] != &d.Data[0] || len(o.Data) != len(d.Data) {
			t.Errorf("%s is not the slice given for it", o.Name)
		}
	}
	short := func(name string, n int) ([]float64, error) {
		if name == "Wv" {
			return byName[name][:n-1], nil
		}
		return byName[name], nil
	}
	if _, err := LayerParamsOver(cfg, short); err == nil {
		t.Error("a slice one value short of Wv was accepted")
	}
	missing := func(name string, n int) ([]float64, error) {
		if name == "PredB2" {
			return nil, errMissing
		}
		return byName[name], nil
	}
	if _, err := LayerParamsOver(cfg, missing); err != errMissing {
		t.Errorf("a missing PredB2 gave the error %v, want %v", err, errMissing)
	}
}

var errMissing = errors.New("no such array")
