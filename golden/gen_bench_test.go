package golden

import (
	"os"
	"testing"

	"github.com/modref/modref/mod/modcase"
)

// BenchmarkGenAtScale times GenerateFromConfig (`modref gen --config`
// without the write) on the production-shaped example of
// docs/examples/llama3-layer-d512-s2048.json: the draws, the truth, and
// the catches measured by emulating every deviation. Run it alone (-run
// '^$' -bench GenAtScale -benchtime 1x): it takes seconds and a few
// hundred MB. docs/performance.md ("The oracle at production shapes")
// records it.
func BenchmarkGenAtScale(b *testing.B) {
	raw, err := os.ReadFile("../docs/examples/llama3-layer-d512-s2048.json")
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
