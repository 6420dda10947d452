package train

import (
	"testing"

	"github.com/modref/modref/internal/benchcpu"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/spec"
)

// benchModels are the model of docs/results.md (d = 64, 4 heads, 4 layers,
// d_ff = 256, byte vocabulary), dense and MoD on every other layer (1 and 3) at
// capacity 12.5 % with the predictor.
var benchModels = []struct {
	name    string
	pattern spec.Pattern
}{
	{"dense", spec.Pattern{Kind: spec.PatternList}},
	{"mod-every-other-12.5", OddLayers},
}

// BenchmarkTrainStep measures one training step of DefaultConfig's run
// (8 sequences of 64 bytes: batch, forward, backward, clipping, AdamW) and
// reports tokens/s and the process's CPU time per step (cpu-ns/op).
func BenchmarkTrainStep(b *testing.B) {
	text := defaultText(b)
	for _, bm := range benchModels {
		b.Run(bm.name, func(b *testing.B) {
			cfg := DefaultConfig()
			m, err := ModelConfig(64, 4, 4, MoDRouting(0.125), bm.pattern)
			if err != nil {
				b.Fatal(err)
			}
			cfg.Model, cfg.Steps, cfg.EvalEvery = m, 1<<30, 0
			tr, err := New(cfg, text)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Step(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			stop := benchcpu.Start(b)
			for b.Loop() {
				if _, err := tr.Step(); err != nil {
					b.Fatal(err)
				}
			}
			stop()
			b.ReportMetric(float64(b.N*cfg.Batch*cfg.SeqLen)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkSample measures decoding 128 bytes greedily through mod's
// decoder (one fed byte and 127 generated) and reports tokens/s: the dense
// model, and the MoD model routing causally by its predictor with the
// predictor's output bias set to −10 (every routed layer skips every
// token) or +10 (routes every token), the two ends between which a trained
// model at capacity 12.5 % decodes. cpu-ns/op is the process's CPU time
// per 128 bytes.
func BenchmarkSample(b *testing.B) {
	for _, c := range []struct {
		name    string
		pattern spec.Pattern
		bias    float32
	}{
		{"dense", spec.Pattern{Kind: spec.PatternList}, 0},
		{"mod-every-other-skip-all", OddLayers, -10},
		{"mod-every-other-route-all", OddLayers, 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := ModelConfig(64, 4, 4, MoDRouting(0.125), c.pattern)
			if err != nil {
				b.Fatal(err)
			}
			m, err := mod.NewModel(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			for _, rl := range m.Layers {
				if rl != nil {
					rl.Predictor.Out.B.Data[0] = c.bias
				}
			}
			cm, err := CausalModel(m, spec.CausalPredictor)
			if err != nil {
				b.Fatal(err)
			}
			sc := SampleConfig{Prompt: []byte("a"), Tokens: 127}
			b.ReportAllocs()
			b.ResetTimer()
			stop := benchcpu.Start(b)
			for b.Loop() {
				if _, err := Generate(cm, sc); err != nil {
					b.Fatal(err)
				}
			}
			stop()
			b.ReportMetric(float64(b.N*128)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
