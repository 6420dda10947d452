package golden

import "testing"

// BenchmarkGenAtScale times GenerateFromConfig (`modref gen --config`
// without the write) on the production-shaped example of
// docs/examples/llama3-layer-d512-s2048.json: the draws, the truth, and
// the catches measured by emulating every deviation. Run it alone (-run
// '^$' -bench GenAtScale -benchtime 1x): it takes seconds and a few
// hundred MB. docs/performance.md ("The oracle at production shapes")
// records it.
func BenchmarkGenAtScale(b *testing.B) {
	benchmarkGenExample(b, "llama3-layer-d512-s2048.json")
}
