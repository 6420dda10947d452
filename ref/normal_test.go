package ref

import (
	"math"
	"testing"
)

// TestNormalMoments checks that normal draws N(0, 1): the mean, the
// variance, the fourth moment and the mass within 1 and beyond 2 standard
// deviations of 400000 draws, each within five standard errors of its
// exact value (a false failure has probability below 1e-5).
func TestNormalMoments(t *testing.T) {
	const n = 400000
	rng := NewRand(7)
	var m1, m2, m4, in1, out2 float64
	for range n {
		x := normal(rng)
		m1 += x
		m2 += float64(x * x)
		m4 += float64(float64(x*x) * float64(x*x))
		if math.Abs(x) < 1 {
			in1++
		}
		if math.Abs(x) > 2 {
			out2++
		}
	}
	p1, p2 := math.Erf(1/math.Sqrt2), math.Erfc(2/math.Sqrt2)
	for _, c := range []struct {
		name      string
		got, want float64
		sd        float64 // standard deviation of one draw's contribution
	}{
		{"mean", m1 / n, 0, 1},
		{"E[x²]", m2 / n, 1, math.Sqrt2},
		{"E[x⁴]", m4 / n, 3, math.Sqrt(96)},
		{"P(|x| < 1)", in1 / n, p1, math.Sqrt(p1 * (1 - p1))},
		{"P(|x| > 2)", out2 / n, p2, math.Sqrt(p2 * (1 - p2))},
	} {
		if se := c.sd / math.Sqrt(n); math.Abs(c.got-c.want) > 5*se {
			t.Errorf("%s = %.5f, want %.5f ± %.5f (5 standard errors)", c.name, c.got, c.want, 5*se)
		}
	}
}
