package autograd

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMLPStep measures a forward and backward pass of a small two-layer
// perceptron on a reused tape; allocs/op must be 0.
func BenchmarkMLPStep(b *testing.B) {
	for _, size := range []struct {
		name                      string
		batch, in, hidden, labels int
	}{
		{"small-32x64x128x10", 32, 64, 128, 10},
		{"medium-256x256x1024x256", 256, 256, 1024, 256},
	} {
		b.Run(size.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 8))
			m := newMLP(rng, size.in, size.hidden, size.labels)
			x, y := batch(rng, size.batch, size.in, size.labels)
			var tp Tape
			m.step(&tp, x, y)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				m.step(&tp, x, y)
			}
		})
	}
}
