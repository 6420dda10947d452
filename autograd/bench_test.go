package autograd

import (
	"fmt"
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

// BenchmarkCausalAttention measures a forward and backward pass of
// CausalAttention over B sequences of S positions each, h heads of dₕ
// values: 8 heads of 64 at the large size of mod's BenchmarkModStep,
// S = 1024, and the routed tokens of its layers at capacity 12.5%,
// S = 128 (one sequence); and its small size, 4 heads of 16 over 4
// sequences of 64 (each head a 64×64 block of scores), on a reused tape.
func BenchmarkCausalAttention(b *testing.B) {
	for _, c := range []struct{ h, dh, s, batch int }{{8, 64, 128, 1}, {8, 64, 1024, 1}, {4, 16, 64, 4}} {
		name := fmt.Sprintf("h%d-dh%d-S%d", c.h, c.dh, c.s)
		if c.batch > 1 {
			name += fmt.Sprintf("-B%d", c.batch)
		}
		b.Run(name, func(b *testing.B) {
			h, dh, s := c.h, c.dh, c.s
			t := s * c.batch
			rng := rand.New(rand.NewPCG(3, 4))
			param := func() *Tensor {
				w := make([]float32, h*t*dh)
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				return NewParam(h*t, dh, w)
			}
			q, k, v := param(), param(), param()
			pos := make([][]int, c.batch)
			for r := range pos {
				pos[r] = make([]int, s)
				for i := range pos[r] {
					pos[r][i] = i
				}
			}
			dy := make([]float32, t*h*dh)
			for i := range dy {
				dy[i] = float32(rng.NormFloat64())
			}
			var tp Tape
			step := func() {
				tp.Reset()
				tp.BackwardFrom(tp.CausalAttention(q, k, v, h, pos, 0), dy)
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

// BenchmarkRMSNorm measures a forward and backward pass of RMSNorm and of
// the chain of five operations it replaces (chainRMSNorm), at the token
// counts and widths of mod's BenchmarkModStep small (256×64) and medium
// (2048×256) sizes, on a reused tape.
func BenchmarkRMSNorm(b *testing.B) {
	for _, s := range []struct{ rows, cols int }{{256, 64}, {2048, 256}} {
		for _, f := range []struct {
			name string
			op   func(tp *Tape, x, gain *Tensor, eps float32) *Tensor
		}{{"fused", (*Tape).RMSNorm}, {"chain", chainRMSNorm}} {
			b.Run(fmt.Sprintf("%s/%dx%d", f.name, s.rows, s.cols), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(3, 4))
				x, gain := NewParam(s.rows, s.cols, nil), NewParam(1, s.cols, nil)
				up := make([]float32, s.rows*s.cols)
				for i := range x.Data {
					x.Data[i], up[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				for i := range gain.Data {
					gain.Data[i] = float32(1 + 0.1*rng.NormFloat64())
				}
				var tp Tape
				step := func() {
					tp.Reset()
					tp.BackwardFrom(f.op(&tp, x, gain, 1e-6), up)
				}
				step()
				b.ReportAllocs()
				for b.Loop() {
					step()
				}
			})
		}
	}
}
