package mod_test

import (
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// refCount is the number of values of ref's tensors.
func refCount(ts []ref.Tensor) int64 {
	var n int64
	for _, t := range ts {
		n += int64(len(t.Data))
	}
	return n
}

// modCount is the number of values of mod's parameters.
func modCount(ps []mod.Param) int64 {
	var n int64
	for _, p := range ps {
		n += int64(len(p.T.Data))
	}
	return n
}

// TestParamCount holds spec's ParamCount, which bounds what a configuration
// makes the readers allocate (docs/training.md, docs/golden-format.md),
// against the parameters ref and mod really allocate: for every
// configuration of the embedded corpus, and for each of them with LayerNorm
// and SwiGLU, a linear_bias router, a predictor of another width and
// learned positions.
func TestParamCount(t *testing.T) {
	corpus := golden.Embedded()
	names, err := corpus.List()
	if err != nil {
		t.Fatal(err)
	}
	variants := []func(*spec.Config){
		func(*spec.Config) {},
		func(c *spec.Config) { c.Block.Norm, c.Block.MLP = spec.NormLayer, spec.ActSwiGLU },
		func(c *spec.Config) {
			c.Router, c.Aux, c.AuxWeight, c.PredictorHidden = spec.RouterLinearBias, spec.AuxPredictor, 0.1, 3
		},
		func(c *spec.Config) { c.Router = spec.RouterL2Norm },
	}
	checked := map[string]int{}
	for _, name := range names {
		m, err := corpus.Manifest(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := m.Config
		for v, change := range variants {
			switch {
			case cfg.Layer != nil:
				c := *cfg.Layer
				change(&c)
				p := ref.NewLayerParams(c, ref.NewRand(1))
				l, err := mod.NewLayer(c, rand.New(rand.NewPCG(1, 2)))
				if err != nil {
					t.Fatalf("%s variant %d: %v", name, v, err)
				}
				if got, r, mc := c.ParamCount(), refCount(p.Tensors("")), modCount(l.Params("")); got != r || got != mc {
					t.Errorf("%s variant %d: ParamCount %d, ref allocates %d, mod %d", name, v, got, r, mc)
				}
				checked["layer"]++
			case cfg.MoDE != nil:
				c := *cfg.MoDE
				if v == 1 {
					c.Block.Norm, c.Block.MLP = spec.NormLayer, spec.ActSwiGLU
				}
				p := ref.NewMoDEParams(c, ref.NewRand(1))
				l, err := mod.NewMoDE(c, rand.New(rand.NewPCG(1, 2)))
				if err != nil {
					t.Fatalf("%s variant %d: %v", name, v, err)
				}
				if got, r, mc := c.ParamCount(), refCount(p.Tensors("")), modCount(l.Params("")); got != r || got != mc {
					t.Errorf("%s variant %d: ParamCount %d, ref allocates %d, mod %d", name, v, got, r, mc)
				}
				checked["mode"]++
			default:
				c := cfg.ModelConfig()
				c.Layers = append([]spec.ModelLayer(nil), c.Layers...)
				for l := range c.Layers {
					if v == 1 {
						c.Layers[l].Config.Block.Norm, c.Layers[l].Config.Block.MLP = spec.NormLayer, spec.ActSwiGLU
					}
					if v == 3 {
						c.Layers[l].Config.Block.Positions, c.MaxLen = spec.PositionLearned, cfg.SeqLen
					}
					if c.Layers[l].Routed && v == 2 {
						change(&c.Layers[l].Config)
					}
				}
				if err := c.Validate(); err != nil {
					t.Fatalf("%s variant %d: %v", name, v, err)
				}
				p := ref.NewModelParams(c, 1)
				mm, err := mod.NewModel(c, 1)
				if err != nil {
					t.Fatalf("%s variant %d: %v", name, v, err)
				}
				if got, r, mc := c.ParamCount(), refCount(p.Tensors()), modCount(mm.Params()); got != r || got != mc {
					t.Errorf("%s variant %d: ParamCount %d, ref allocates %d, mod %d", name, v, got, r, mc)
				}
				checked["model"]++
			}
		}
	}
	if checked["layer"] == 0 || checked["mode"] == 0 || checked["model"] == 0 {
		t.Errorf("configurations checked by kind: %v, want every kind", checked)
	}
}
