package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScaleShifted checks ScaleShifted on every path this machine can run
// against the Go loop, bit for bit (a NaN only matching a NaN: see
// ScaleShifted), on rows of every length
// up to 100 and a few long ones: probabilities in [0, 1] with +0s, dP and s
// of mixed scales, and specials (±0, subnormals, ±MaxFloat32, ±Inf, NaN) in
// y, g and s, so that the subtraction overflows, underflows and cancels.
func TestScaleShifted(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-40, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	rng := rand.New(rand.NewPCG(41, 42))
	draw := func(p float64) float32 {
		if rng.IntN(20) == 0 {
			return specials[rng.IntN(len(specials))]
		}
		if p > 0 {
			if rng.IntN(3) == 0 {
				return 0
			}
			return float32(rng.Float64())
		}
		return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
	}
	for _, pt := range paths {
		onPath(pt, func() {
			for trial := 0; trial < 20000; trial++ {
				n := trial % 101
				if trial%500 == 0 {
					n = 1000 + rng.IntN(3000)
				}
				g, y := make([]float32, n+1), make([]float32, n)
				for j := range y {
					y[j], g[j] = draw(1), draw(0)
				}
				g[n] = 42
				s := float64(draw(0)) * (1 + rng.Float64())
				if trial%7 == 0 {
					s = float64(g[rng.IntN(n+1)]) // cancels one row exactly
				}
				want := make([]float32, n)
				for j := range want {
					want[j] = float32(float64(y[j]) * (float64(g[j]) - s))
				}
				ScaleShifted(g[:n], y, s)
				if g[n] != 42 {
					t.Fatalf("%s path: ScaleShifted of %d values wrote past them", pt.name, n)
				}
				for j := range want {
					if math.Float32bits(g[j]) != math.Float32bits(want[j]) && !(g[j] != g[j] && want[j] != want[j]) {
						t.Fatalf("%s path: ScaleShifted at %d of %d (y %v, s %v): got %v (%#08x), the loop gives %v (%#08x)",
							pt.name, j, n, y[j], s, g[j], math.Float32bits(g[j]), want[j], math.Float32bits(want[j]))
					}
				}
			}
		})
	}
}
