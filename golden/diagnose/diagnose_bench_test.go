package diagnose

import (
	"testing"

	"github.com/modref/modref/golden/format"
)

// BenchmarkDiagnose times Diagnose on the corpus's slowest case for it
// (layer-capacity-floor: S = 100, every emulated deviation recomputed with
// finite-difference gradients) and on layer-paper, with the oracle's own
// arrays as the candidate. docs/performance.md ("The oracle") records it.
func BenchmarkDiagnose(b *testing.B) {
	for _, name := range []string{"layer-paper", "layer-capacity-floor"} {
		b.Run(name, func(b *testing.B) {
			c, err := format.Load("../corpus", name)
			if err != nil {
				b.Fatal(err)
			}
			cand := c.Candidate()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Diagnose(c, cand); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
