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

// BenchmarkExplain times Explain on candidates with named deviations and
// an unnamed bug (a router detached from the loss), which no emulation
// matches, given Diagnose's results (the search for combinations run to
// its end): the sets without one deviation it judges and the remainder's
// emulation. docs/performance.md records it.
func BenchmarkExplain(b *testing.B) {
	for _, tc := range []struct{ name, planted string }{
		{"layer-capacity-floor", "residual_twice+weight_mlp_only"},
		{"model-every-other", "residual_twice+rope_gathered_indices+weight_mlp_only+shared_router"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := format.Load("../corpus", tc.name)
			if err != nil {
				b.Fatal(err)
			}
			cand, err := DeviantCandidate(c, tc.planted, "")
			if err != nil {
				b.Fatal(err)
			}
			unnamedBugs["router_detached"](c, cand)
			rs, err := Diagnose(c, cand)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				p, err := Explain(c, cand, rs)
				if err != nil || p == nil {
					b.Fatalf("explain: %v, %v", p, err)
				}
			}
		})
	}
}
