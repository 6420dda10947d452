package autograd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLargest checks largest, which attention's exactness checks read,
// against max |x_i| computed in float64 with an explicit NaN test, on
// slices mixing normal values, ±0, subnormals, ±MaxFloat32, ±Inf and NaN.
func TestLargest(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-40, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 20000; trial++ {
		x := make([]float32, rng.IntN(40))
		for i := range x {
			if rng.IntN(8) == 0 {
				x[i] = specials[rng.IntN(len(specials))]
			} else {
				x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(60)-30)))
			}
		}
		want := 0.0
		for _, v := range x {
			if v != v {
				want = math.Inf(1)
				break
			}
			want = math.Max(want, math.Abs(float64(v)))
		}
		if got := largest(x); got != want {
			t.Fatalf("largest(%v) = %v, want %v", x, got, want)
		}
		if got, want := finite(x), want <= math.MaxFloat32; got != want {
			t.Fatalf("finite(%v) = %v, want %v", x, got, want)
		}
	}
}
