package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/autograd"
)

// BenchmarkLMStep measures one forward and backward pass of a dense language
// model's loss on a reused tape (no optimiser step) at the sizes of issue 4:
// vocabulary 256, d_ff = 4d, RMSNorm, GELU. allocs/op should be 0.
func BenchmarkLMStep(b *testing.B) {
	for _, size := range []struct {
		name                         string
		d, heads, seqLen, batch, lay int
	}{
		{"small-d64-h4-S64-B4-L4", 64, 4, 64, 4, 4},
		{"medium-d256-h8-S256-B8-L4", 256, 8, 256, 8, 4},
	} {
		b.Run(size.name, func(b *testing.B) {
			cfg := Config{Vocab: 256, Layers: size.lay, Block: BlockConfig{D: size.d, Heads: size.heads, DFF: 4 * size.d}}
			m, err := NewLM(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			tokens := make([]int, size.batch*size.seqLen)
			for i := range tokens {
				tokens[i] = rng.IntN(cfg.Vocab)
			}
			targets := nextTokens(tokens, size.batch, size.seqLen)
			pos := Positions(size.batch, size.seqLen)
			params := m.Params()
			var tp autograd.Tape
			step := func() {
				tp.Reset()
				for _, p := range params {
					p.ZeroGrad()
				}
				tp.Backward(m.Loss(&tp, tokens, pos, targets))
			}
			step()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
		})
	}
}
