package mod_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/internal/benchcpu"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/spec"
)

// BenchmarkModStep measures one forward and backward pass of a whole MoD
// language model's loss on a reused tape (no optimiser step) at the sizes of
// issue 4 (vocabulary 256, d_ff = 4d, RMSNorm, GELU, RoPE), each dense, MoD
// on every other layer at capacity 12.5%, and MoD on every layer at 12.5%
// (linear router, raw weighting, gather compute). It reports the forward
// FLOPs ratio to the dense model as flops/dense, and the process's CPU time
// per step as cpu-ns/op. The large size runs only without -short.
func BenchmarkModStep(b *testing.B) {
	sizes := []struct {
		name                         string
		d, heads, seqLen, batch, lay int
	}{
		{"small-d64-h4-S64-B4-L4", 64, 4, 64, 4, 4},
		{"medium-d256-h8-S256-B8-L4", 256, 8, 256, 8, 4},
		{"large-d512-h8-S1024-B2-L4", 512, 8, 1024, 2, 4},
	}
	patterns := []struct {
		name    string
		pattern spec.Pattern
	}{
		{"dense", spec.Pattern{Kind: spec.PatternList}},
		{"mod-every-other-12.5", spec.Pattern{Kind: spec.PatternEveryOther}},
		{"mod-all-12.5", spec.Pattern{Kind: spec.PatternAll}},
	}
	for _, size := range sizes {
		for _, pat := range patterns {
			b.Run(size.name+"/"+pat.name, func(b *testing.B) {
				if size.d == 512 && testing.Short() {
					b.Skip("large size skipped with -short")
				}
				routing := spec.DefaultConfig(spec.DefaultBlockConfig(size.d, size.heads, 4*size.d), 0.125)
				cfg, err := spec.NewModelConfig(256, 0, size.lay, routing, pat.pattern, nil)
				if err != nil {
					b.Fatal(err)
				}
				m, err := mod.NewModel(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				in := mod.ModelInputs{Tokens: make([][]int, size.batch), Targets: make([][]int, size.batch)}
				for r := range size.batch {
					row := make([]int, size.seqLen+1)
					for i := range row {
						row[i] = rng.IntN(cfg.Vocab)
					}
					in.Tokens[r], in.Targets[r] = row[:size.seqLen], row[1:]
				}
				params := mod.Tensors(m.Params())
				var tp autograd.Tape
				var ratio float64
				step := func() {
					tp.Reset()
					for _, p := range params {
						p.ZeroGrad()
					}
					res, err := m.Forward(&tp, in)
					if err != nil {
						b.Fatal(err)
					}
					tp.Backward(res.Loss)
					ratio = res.FLOPs.Ratio
				}
				step()
				b.ReportAllocs()
				b.ResetTimer()
				stop := benchcpu.Start(b)
				for b.Loop() {
					step()
				}
				stop()
				b.ReportMetric(ratio, "flops/dense")
			})
		}
	}
}

// BenchmarkDecode measures decoding 128, 512 and 2048 tokens with
// mod.Decoder from a fresh decoder, on the small size of BenchmarkModStep
// (d = 64, 4 heads, 4 layers), dense and with every layer routed causally
// by its router at capacity 12.5% (its top-k targets matter only in
// training). B/token and allocs/token show whether a token's cost in
// memory grows with the sequence; the key-value caches' own growth is
// amortised (docs/performance.md).
func BenchmarkDecode(b *testing.B) {
	for _, pat := range []struct {
		name    string
		pattern spec.Pattern
	}{{"dense", spec.Pattern{Kind: spec.PatternList}}, {"mod-all-causal", spec.Pattern{Kind: spec.PatternAll}}} {
		for _, tokens := range []int{128, 512, 2048} {
			b.Run(fmt.Sprintf("%s-%d", pat.name, tokens), func(b *testing.B) {
				routing := spec.DefaultConfig(spec.DefaultBlockConfig(64, 4, 256), 0.125)
				routing.Causal = spec.CausalRouter
				cfg, err := spec.NewModelConfig(256, 0, 4, routing, pat.pattern, nil)
				if err != nil {
					b.Fatal(err)
				}
				m, err := mod.NewModel(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for b.Loop() {
					dec, err := mod.NewDecoder(m)
					if err != nil {
						b.Fatal(err)
					}
					for i := range tokens {
						if _, err := dec.Step(i % cfg.Vocab); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.ReadMemStats(&after)
				perToken := float64(b.N * tokens)
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/perToken, "B/token")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/perToken, "allocs/token")
			})
		}
	}
}
