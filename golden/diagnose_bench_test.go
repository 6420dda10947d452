package golden

import (
	"fmt"
	"os"
	"testing"

	"github.com/modref/modref/golden/diagnose"
)

// BenchmarkDiagnoseAtScale times Diagnose on the production-shaped example
// of docs/examples/llama3-layer-d512-s2048.json (d = 512, 4 heads of 128,
// SwiGLU d_ff = 1792, S = 2048, 12.5 % capacity) at B = 1 and at its own
// B = 3 (rows padded to 2048, 1536 and 1031), every emulated deviation
// recomputed with its backward pass, the oracle's own arrays as the
// candidate; generating the case is outside the timing. Run it alone
// (-run '^$' -bench DiagnoseAtScale -benchtime 1x): each case takes
// seconds and 2-3 GB. docs/performance.md ("The oracle at production
// shapes") records it.
func BenchmarkDiagnoseAtScale(b *testing.B) {
	raw, err := os.ReadFile("../docs/examples/llama3-layer-d512-s2048.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 3} {
		b.Run(fmt.Sprintf("B=%d", batch), func(b *testing.B) {
			g, err := DecodeGenConfig(raw)
			if err != nil {
				b.Fatal(err)
			}
			if batch != g.Config.Batch {
				g.Config.Batch, g.Config.ValidLengths = batch, g.Config.ValidLengths[:batch]
			}
			c, err := generateCase(g)
			if err != nil {
				b.Fatal(err)
			}
			cand := c.Candidate()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := diagnose.Diagnose(c, cand); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
