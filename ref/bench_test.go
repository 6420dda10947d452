package ref

import (
	"fmt"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// BenchmarkLayerGradients is issue 23's routed layer case at production
// shape: B = 2, S = 2048, d = 512, 8 heads of 64, d_ff = 2048, the paper's
// layer at capacity 12.5 % and 100 %, forward and every gradient
// (LayerForwardGradients). docs/performance.md records it.
func BenchmarkLayerGradients(b *testing.B) {
	for _, capacity := range []float64{0.125, 1} {
		b.Run(fmt.Sprintf("B2-S2048-d512-h8-dff2048-c%v", capacity), func(b *testing.B) {
			cfg := spec.DefaultConfig(spec.DefaultBlockConfig(512, 8, 2048), capacity)
			p := NewLayerParams(cfg, NewRand(1))
			rng := NewRand(2)
			var in LayerInputs
			var u []*mat.Dense
			for range 2 {
				in.X = append(in.X, RandomMatrix(rng, 2048, 512, 1))
				u = append(u, RandomMatrix(rng, 2048, 512, 1))
			}
			b.ResetTimer()
			for range b.N {
				if _, _, err := LayerForwardGradients(cfg, p, in, u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkModelGradients is issue 23's model case: 4 layers, every other
// one routed at 12.5 %, B = 2, S = 1024, d = 256, 4 heads of 64, vocabulary
// 4096, forward and every gradient (ModelForwardGradients).
func BenchmarkModelGradients(b *testing.B) {
	routing := spec.DefaultConfig(spec.DefaultBlockConfig(256, 4, 1024), 0.125)
	c, err := spec.NewModelConfig(4096, 0, 4, routing, spec.Pattern{Kind: spec.PatternEveryOther}, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := NewModelParams(c, 1)
	var in ModelInputs
	in.Tokens, in.Targets = RandomTokens(NewRand(2), 2, 1024, 4096)
	b.ResetTimer()
	for range b.N {
		if _, _, err := ModelForwardGradients(c, p, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLayerForward is the forward pass the issue started from (a ref
// forward at B = 8, S = 2048, d = 512 took 36 s): the paper's routed layer,
// 8 heads of 64, d_ff = 2048, capacity 12.5 % and 100 %, LayerForward alone.
func BenchmarkLayerForward(b *testing.B) {
	for _, capacity := range []float64{0.125, 1} {
		b.Run(fmt.Sprintf("B8-S2048-d512-h8-dff2048-c%v", capacity), func(b *testing.B) {
			cfg := spec.DefaultConfig(spec.DefaultBlockConfig(512, 8, 2048), capacity)
			p := NewLayerParams(cfg, NewRand(1))
			rng := NewRand(2)
			var in LayerInputs
			for range 8 {
				in.X = append(in.X, RandomMatrix(rng, 2048, 512, 1))
			}
			b.ResetTimer()
			for range b.N {
				if _, err := LayerForward(cfg, p, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
