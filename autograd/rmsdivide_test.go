package autograd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSDivideAgrees checks RMSNorm under Rounding.RMSDivide against mod's
// own RMSNorm: the two forms compute the same function and gradients, so on
// well-scaled rows of every width from 1 to 40 their outputs and gradients
// agree to a few float32 roundings of the terms (a wrong derivative in
// either would differ by the size of the gradients themselves), and they
// are not bit for bit the same everywhere (the form is in use).
func TestRMSDivideAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 1))
	differ := false
	for cols := 1; cols <= 40; cols++ {
		rows := 1 + rng.IntN(5)
		vals := func(n int) []float32 {
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(rng.NormFloat64())
			}
			return d
		}
		xd, gd, up := vals(rows*cols), vals(cols), vals(rows*cols)
		run := func(r Rounding) [3][]float32 {
			x := NewParam(rows, cols, append([]float32(nil), xd...))
			gain := NewParam(1, cols, append([]float32(nil), gd...))
			var tp Tape
			tp.SetRounding(r)
			out := tp.RMSNorm(x, gain, 1e-6)
			tp.BackwardFrom(out, up)
			return [3][]float32{out.Data, x.Grad, gain.Grad}
		}
		got, want := run(Rounding{RMSDivide: true}), run(Rounding{})
		for n, name := range []string{"output", "dx", "dgain"} {
			scale := 0.0
			for _, w := range want[n] {
				scale = math.Max(scale, math.Abs(float64(w)))
			}
			for i, w := range want[n] {
				d := math.Abs(float64(got[n][i] - w))
				if d > 64*0x1p-24*(scale+1) {
					t.Fatalf("width %d, %s[%d]: divide %v, rsqrt %v: differ by %.3g, more than 64 roundings of %.3g", cols, name, i, got[n][i], w, d, scale)
				}
				differ = differ || d != 0
			}
		}
	}
	if !differ {
		t.Error("RMSDivide gave mod's bits on every width: the divide form is not in use")
	}
}
