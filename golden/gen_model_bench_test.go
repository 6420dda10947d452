package golden

import (
	"os"
	"testing"

	"github.com/modref/modref/mod/modcase"
)

// BenchmarkGenModelAtScale times GenerateFromConfig (`modref gen --config`
// without the write) on the production-shaped model and decode examples:
// the four-layer model of docs/examples/llama3-model-d512-s2048.json (two
// layers routed top-k) and the three-layer decode case of
// docs/examples/llama3-decode-d512-s2048.json (routed causally by its
// router), both at d = 512, S = 2048: the draw, the routing moved apart,
// the truth, and the catches measured by emulating every deviation. Run
// it alone (-run '^$' -bench GenModelAtScale -benchtime 1x): each takes
// tens of seconds and a few GB. docs/performance.md (issue 35, "A
// four-layer model and a decoding case") records it.
func BenchmarkGenModelAtScale(b *testing.B) {
	for _, bc := range []struct{ name, file string }{
		{"model", "llama3-model-d512-s2048.json"},
		{"decode", "llama3-decode-d512-s2048.json"},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkGenExample(b, bc.file) })
	}
}

// benchmarkGenExample times GenerateFromConfig on the configuration of
// docs/examples/file.
func benchmarkGenExample(b *testing.B, file string) {
	raw, err := os.ReadFile("../docs/examples/" + file)
	if err != nil {
		b.Fatal(err)
	}
	g, err := DecodeGenConfig(raw)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := GenerateFromConfig(g, modcase.Float32Tolerances); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenMoDEUngenerable times genMoDE refusing the two MoDE
// configurations `modref fuzz` draws first for case fuzz-1-27 at
// --max-seq 64 (docs/performance.md, issue 35): a staged layer of two
// experts, which no draw can generate (modeNeverCovers), and an integrated
// one of four experts and two no-op experts, none of whose 200 draws keeps
// its routing clear with a token no expert chose.
func BenchmarkGenMoDEUngenerable(b *testing.B) {
	for _, bc := range []struct{ name, config string }{
		{"staged", `{"name":"fuzz-1-27","kind":"mode","seed":1627419615,"config":{"batch":2,"seq_len":28,"mode":{"d_model":256,"heads":4,"d_ff":256,"norm":"rmsnorm","norm_eps":0.00001,"mlp":"gelu","positions":"rope","rope_base":10000,"window":11,"qkv_bias":true,"form":"staged","experts":2,"noop_experts":0,"capacity":0.75,"expert_capacity":0.25}}}`},
		{"integrated", `{"name":"fuzz-1-27","kind":"mode","seed":1862336897,"config":{"batch":1,"seq_len":23,"mode":{"d_model":128,"heads":1,"d_ff":512,"norm":"rmsnorm","norm_eps":0.00001,"mlp":"gelu","positions":"rope","rope_base":500000,"form":"integrated","experts":4,"noop_experts":2,"capacity":0,"expert_capacity":0.5}}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g, err := DecodeGenConfig([]byte(bc.config))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := GenerateUnmeasured(g, nil); err == nil {
					b.Fatal("generated")
				}
			}
		})
	}
}
