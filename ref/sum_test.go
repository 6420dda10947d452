package ref

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestSumIsExactlyRounded holds Sum to the exact sum of products computed
// in math/big, on sums that cancel to 1e-8 of their terms (a layer case's
// loss at production shapes): within one rounding of the exact value,
// where a sequential float64 sum errs by hundreds.
func TestSumIsExactlyRounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worstSeq := 0.0
	for trial := range 20 {
		n := 1000 + rng.IntN(20000)
		a, b := make([]float64, n), make([]float64, n)
		exact := new(big.Float).SetPrec(4096)
		for i := range a {
			a[i], b[i] = rng.NormFloat64(), rng.NormFloat64()
		}
		// Make the sum cancel: the last term is minus the sum of the others.
		var pre Sum
		for i := range n - 1 {
			pre.AddProduct(a[i], b[i])
		}
		a[n-1], b[n-1] = -pre.Value(), 1+1e-8*rng.Float64()
		var s Sum
		seq := 0.0
		for i := range a {
			p := new(big.Float).SetPrec(4096).Mul(new(big.Float).SetFloat64(a[i]), new(big.Float).SetFloat64(b[i]))
			exact.Add(exact, p)
			s.AddProduct(a[i], b[i])
			seq += float64(a[i] * b[i])
		}
		want, _ := exact.Float64()
		ulp := math.Abs(math.Nextafter(want, math.Inf(1)) - want)
		if d := math.Abs(s.Value() - want); d > ulp {
			t.Fatalf("trial %d, n %d: Sum %v, exact %v: %.3g ulp", trial, n, s.Value(), want, d/ulp)
		}
		worstSeq = math.Max(worstSeq, math.Abs(seq-want)/ulp)
	}
	t.Logf("sequential sum: worst %.3g ulp of the exact value", worstSeq)
}
