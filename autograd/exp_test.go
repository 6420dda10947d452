package autograd

import (
	"math"
	"testing"
)

// TestExpAgainstMathExp measures exp against math.Exp on a dense grid over
// its whole range (every 2⁻¹⁰·1.37, 1.06 million points, from the subnormal
// results to overflow) and at the special values: its relative error must
// stay below 1e-9 (measured 2.7e-10, the degree-8 truncation; see
// docs/tolerances.md), subnormal results within 1e-9 of the smallest
// normal, and NaN, ±Inf, 0 and the range ends must come out as math.Exp's
// (to the same bounds).
func TestExpAgainstMathExp(t *testing.T) {
	worst, at := 0.0, 0.0
	for x := -746.0; x < 710; x += 0x1p-10 * 1.37 {
		got, want := exp(x), math.Exp(x)
		if want < 0x1p-1022 {
			if math.Abs(got-want) > 1e-9*0x1p-1022 {
				t.Fatalf("exp(%v) = %v, math.Exp gives %v", x, got, want)
			}
			continue
		}
		if e := math.Abs(got-want) / want; e > worst {
			worst, at = e, x
		}
	}
	if worst > 1e-9 {
		t.Errorf("exp's relative error reaches %.3g at x = %v, want below 1e-9", worst, at)
	}
	t.Logf("worst relative error %.3g at x = %v", worst, at)
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 709.78, 709.79, -745.13, -745.14, 1e300, -1e300} {
		got, want := exp(x), math.Exp(x)
		// Below the smallest normal, math.Exp itself differs between
		// architectures (at −745.13 amd64 gives 5e-324 and arm64 0).
		tol := 1e-9 * max(want, 0x1p-1022)
		if !(got == want || (math.IsNaN(got) && math.IsNaN(want)) || math.Abs(got-want) <= tol) {
			t.Errorf("exp(%v) = %v, math.Exp gives %v", x, got, want)
		}
	}
}
