package mod_test

import (
	"fmt"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// TestLayerCombinations checks every router × weighting × compute mode ×
// auxiliary objective against ref, forward and every parameter's gradient
// (at 8 coordinates each; TestLayerMatchesRef checks every coordinate), on one
// padded batch (B = 2, S = 6, valid lengths 6 and 4), so that each
// combination is covered on every run and not only when rapid draws it.
func TestLayerCombinations(t *testing.T) {
	routers := []spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm, spec.RouterRandom}
	weightings := []spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightSoftmax, spec.WeightNone}
	for _, router := range routers {
		for _, w := range weightings {
			for _, compute := range []spec.Compute{spec.ComputeGather, spec.ComputeDense} {
				for _, aux := range []spec.AuxObjective{spec.AuxNone, spec.AuxRouterBCE, spec.AuxPredictor} {
					name := fmt.Sprintf("%s/%s/%s/%s", router, w, compute, aux)
					t.Run(name, func(t *testing.T) {
						cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 8), 0.5)
						cfg.Router, cfg.Weighting, cfg.Compute, cfg.Aux = router, w, compute, aux
						if aux != spec.AuxNone {
							cfg.AuxWeight = 0.1
						}
						cfg.LoadBalanceWeight = 0.01
						checkLayerAgainstRef(t, fixedLayerCase(cfg, 2, 6, []int{6, 4}, 11), 8)
					})
				}
			}
		}
	}
}

// fixedLayerCase draws ref's parameters and inputs for cfg from seed,
// rounded to float32.
func fixedLayerCase(cfg spec.Config, rows, s int, valid []int, seed uint64) layerCase {
	rng := ref.NewRand(seed)
	c := layerCase{cfg: cfg, p: ref.NewLayerParams(cfg, rng)}
	roundParams(c.p.Tensors(""))
	c.in.Valid = valid
	for range rows {
		x := ref.RandomMatrix(rng, s, cfg.Block.D, 1)
		round32(x.RawMatrix().Data)
		c.in.X = append(c.in.X, x)
	}
	if cfg.Router == spec.RouterRandom {
		c.in.Noise = ref.RandomField(rng, rows, s)
		for _, r := range c.in.Noise {
			round32(r)
		}
	}
	c.u = flatBatch([]*mat.Dense{ref.RandomMatrix(rng, rows*s, cfg.Block.D, 1)})
	round32(c.u)
	return c
}

// TestModelCombinations checks models of four layers with padding under two
// layer patterns (every other layer, every layer), each router and each
// auxiliary objective, against ref.
func TestModelCombinations(t *testing.T) {
	for _, pat := range []spec.Pattern{{Kind: spec.PatternEveryOther}, {Kind: spec.PatternAll}} {
		for _, router := range []spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm, spec.RouterRandom} {
			for _, aux := range []spec.AuxObjective{spec.AuxNone, spec.AuxRouterBCE, spec.AuxPredictor} {
				t.Run(fmt.Sprintf("%s/%s/%s", pat.Kind, router, aux), func(t *testing.T) {
					routing := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
					routing.Router, routing.Aux, routing.Weighting = router, aux, spec.WeightSigmoid
					if aux != spec.AuxNone {
						routing.AuxWeight = 0.1
					}
					cfg, err := spec.NewModelConfig(9, 0, 4, routing, pat, nil)
					if err != nil {
						t.Fatal(err)
					}
					// The first parameter seed whose routing is decisive
					// everywhere (the check skips near ties).
					for seed := uint64(3); ; seed++ {
						c := combinationModel(cfg, router, seed)
						if decisiveModel(t, c) || seed == 40 {
							checkModelAgainstRef(t, c, 5)
							return
						}
					}
				})
			}
		}
	}
}

// combinationModel draws the model case of TestModelCombinations.
func combinationModel(cfg spec.ModelConfig, router spec.RouterKind, seed uint64) modelCase {
	c := modelCase{cfg: cfg, p: ref.NewModelParams(cfg, seed)}
	roundParams(c.p.Tensors())
	rng := ref.NewRand(seed)
	c.in.Tokens, c.in.Targets = ref.RandomTokens(rng, 2, 7, cfg.Vocab)
	c.in.Valid = []int{7, 5}
	for b := 5; b < 7; b++ {
		c.in.Targets[1][b] = ref.IgnoreTarget
	}
	for _, ml := range cfg.Layers {
		var noise [][]float64
		if ml.Routed && router == spec.RouterRandom {
			noise = ref.RandomField(rng, 2, 7)
			for _, r := range noise {
				round32(r)
			}
		}
		c.in.Noise = append(c.in.Noise, noise)
		c.in.Jitter = append(c.in.Jitter, nil)
	}
	return c
}

// decisiveModel reports whether every routing decision of ref's forward is
// at least selectionMargin from a flip.
func decisiveModel(t *testing.T, c modelCase) bool {
	res, err := ref.ModelForward(c.cfg, c.p, c.in)
	if err != nil {
		t.Fatal(err)
	}
	for l, lr := range res.Layers {
		if lr != nil && !decisive(c.cfg.Layers[l].Config, lr, c.in.Valid) {
			return false
		}
	}
	return true
}
