package ref

import (
	"math"
	"math/rand/v2"

	"github.com/modref/modref/internal/elem"
)

// normal returns a standard normal draw from rng by Marsaglia's polar
// method: (u, v) uniform in the unit disc, s = u² + v², and
// u·√(−2 log s / s) is N(0, 1). It replaces rand's NormFloat64, which calls
// math.Exp and math.Log and compares a fusable float32 product, and so draws
// different numbers on arm64 than on amd64 from the same seed; here every
// operation is rounded explicitly and log is elem.Log, so a seed gives the
// same parameters on every machine.
func normal(rng *rand.Rand) float64 {
	for {
		// Float64 is k·2^-53, so 2x − 1 is exact.
		u := float64(2*float64(rng.Float64())) - 1
		v := float64(2*float64(rng.Float64())) - 1
		s := float64(u*u) + float64(v*v)
		if s > 0 && s < 1 {
			return u * math.Sqrt(-2*elem.Log(s)/s)
		}
	}
}

// skipNormals advances rng past n draws of normal without computing them:
// the same uniforms are drawn and rejected, but no logarithm or square root
// is taken, so rng ends in the state n calls of normal leave it in.
func skipNormals(rng *rand.Rand, n int) {
	for range n {
		for {
			u := float64(2*float64(rng.Float64())) - 1
			v := float64(2*float64(rng.Float64())) - 1
			if s := float64(u*u) + float64(v*v); s > 0 && s < 1 {
				break
			}
		}
	}
}
