package autograd

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// Bounds on the float32 evaluation of Φ(x) and Φ(x) + x·φ(x) in gelu.go,
// as absolute errors against float64 (both functions lie in [−0.13, 1.13]).
// TestGELUDense measured 6.0e-8 for Φ and 1.2e-7 for Φ + x·φ (about one
// and two float32 roundings of values near 1) over the grid and the interval
// boundaries; the bounds are twice that. A wrong coefficient or a wrong
// interval gives errors of 1e-3 or more.
const (
	geluPhiTol   = 1.2e-7
	geluDerivTol = 2.4e-7
)

func phi64(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

func geluDeriv64(x float64) float64 {
	return phi64(x) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// geluErrors returns the absolute errors of Φ and of Φ + x·φ at x.
func geluErrors(x float32) (ePhi, eDeriv float64) {
	ePhi = math.Abs(float64(geluEval(x, false)) - phi64(float64(x)))
	eDeriv = math.Abs(float64(geluEval(x, true)) - geluDeriv64(float64(x)))
	return ePhi, eDeriv
}

// geluSamples lists every multiple of 2⁻¹⁰ in [−10, 10] and the 32 float32
// values on either side of every interval boundary of the table (±8 included).
func geluSamples() []float32 {
	var xs []float32
	for i := -10 << 10; i <= 10<<10; i++ {
		xs = append(xs, float32(i)/(1<<10))
	}
	for i := 0; i <= geluPieces; i++ {
		b := float32(geluLo + float64(i)/geluPerUnit)
		lo, hi := b, b
		for range 32 {
			lo = math.Nextafter32(lo, float32(math.Inf(-1)))
			hi = math.Nextafter32(hi, float32(math.Inf(1)))
			xs = append(xs, lo, hi)
		}
		xs = append(xs, b)
	}
	return xs
}

func TestGELUDense(t *testing.T) {
	var worstPhi, worstDeriv float64
	var atPhi, atDeriv float32
	for _, x := range geluSamples() {
		ePhi, eDeriv := geluErrors(x)
		if ePhi > worstPhi {
			worstPhi, atPhi = ePhi, x
		}
		if eDeriv > worstDeriv {
			worstDeriv, atDeriv = eDeriv, x
		}
	}
	t.Logf("worst |Φ32 − Φ| = %.3g at x = %v; worst |(Φ + xφ)32 − (Φ + xφ)| = %.3g at x = %v",
		worstPhi, atPhi, worstDeriv, atDeriv)
	if worstPhi > geluPhiTol {
		t.Errorf("Φ(%v): float32 %v, float64 %v: error %.3g > %.3g",
			atPhi, geluEval(atPhi, false), phi64(float64(atPhi)), worstPhi, geluPhiTol)
	}
	if worstDeriv > geluDerivTol {
		t.Errorf("Φ + xφ at %v: float32 %v, float64 %v: error %.3g > %.3g",
			atDeriv, geluEval(atDeriv, true), geluDeriv64(float64(atDeriv)), worstDeriv, geluDerivTol)
	}
}

func TestGELUProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		scale := rapid.SampledFrom([]float32{1, 8, 1e4, 1e38}).Draw(rt, "scale")
		x := rapid.Float32Range(-scale, scale).Draw(rt, "x")
		ePhi, eDeriv := geluErrors(x)
		if ePhi > geluPhiTol || eDeriv > geluDerivTol {
			rt.Fatalf("x = %v: |Φ32 − Φ| = %.3g (bound %.3g), |(Φ + xφ)32 − (Φ + xφ)| = %.3g (bound %.3g)",
				x, ePhi, geluPhiTol, eDeriv, geluDerivTol)
		}
		// The forward GELU x·Φ(x) within the error measure of docs/tolerances.md.
		y := make([]float32, 1)
		geluForward(y, []float32{x})
		want := float64(x) * phi64(float64(x))
		if e := math.Abs(float64(y[0])-want) / math.Max(math.Abs(want), 1); e > forwardTol {
			rt.Fatalf("GELU(%v) = %v, float64 %v: error %.3g > %.3g", x, y[0], want, e, forwardTol)
		}
	})
}

func TestGELUSpecialValues(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		x, phi, deriv float32
	}{{inf, 1, 1}, {-inf, 0, 0}, {100, 1, 1}, {-100, 0, 0}} {
		if p, d := geluEval(c.x, false), geluEval(c.x, true); p != c.phi || d != c.deriv {
			t.Errorf("x = %v: Φ = %v, Φ + xφ = %v; want %v and %v", c.x, p, d, c.phi, c.deriv)
		}
	}
	if p, d := geluEval(nan, false), geluEval(nan, true); p == p || d == d {
		t.Errorf("x = NaN: Φ = %v, Φ + xφ = %v; want NaN", p, d)
	}
}

func BenchmarkGELU(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i-len(x)/2) / 4096
	}
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		geluForward(y, x)
		geluBackward(y, x, x)
	}
}
