package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxAbsBits checks MaxAbsBits on every path this machine can run
// against the Go loop, on slices of every length up to 100 (and a few long
// ones) mixing normal values, ±0, subnormals, ±MaxFloat32, ±Inf and NaNs
// of both signs and several payloads, the largest anywhere in the slice.
func TestMaxAbsBits(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-40, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001), math.Float32frombits(0xff800002)}
	rng := rand.New(rand.NewPCG(31, 32))
	for _, pt := range paths {
		onPath(pt, func() {
			for trial := 0; trial < 20000; trial++ {
				n := trial % 101
				if trial%500 == 0 {
					n = 1000 + rng.IntN(3000)
				}
				x := make([]float32, n)
				for i := range x {
					if rng.IntN(16) == 0 {
						x[i] = specials[rng.IntN(len(specials))]
					} else {
						x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(60)-30)))
					}
				}
				var want uint32
				for _, v := range x {
					want = max(want, math.Float32bits(v)&0x7fffffff)
				}
				if got := MaxAbsBits(x); got != want {
					t.Fatalf("%s path: MaxAbsBits of %d values = %#08x, the loop gives %#08x", pt.name, n, got, want)
				}
			}
		})
	}
}
