package elem

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

// TestSpecialCases checks the IEEE special values, the overflow and
// underflow thresholds and the subnormal range, against values known
// exactly.
func TestSpecialCases(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	smallest := math.SmallestNonzeroFloat64
	cases := []struct {
		name string
		got  float64
		want float64
	}{
		{"Exp(NaN)", Exp(nan), nan},
		{"Exp(+Inf)", Exp(inf), inf},
		{"Exp(-Inf)", Exp(-inf), 0},
		{"Exp(+0)", Exp(0), 1},
		{"Exp(-0)", Exp(math.Copysign(0, -1)), 1},
		{"Exp(709.79)", Exp(709.79), inf},
		{"Exp(-745.14)", Exp(-745.14), 0},
		{"Exp(-745.13)", Exp(-745.13), smallest},
		{"Exp(1e-300)", Exp(1e-300), 1},
		{"Log(NaN)", Log(nan), nan},
		{"Log(+Inf)", Log(inf), inf},
		{"Log(+0)", Log(0), -inf},
		{"Log(-0)", Log(math.Copysign(0, -1)), -inf},
		{"Log(-1)", Log(-1), nan},
		{"Log(-Inf)", Log(-inf), nan},
		{"Log(1)", Log(1), 0},
		{"Log1p(NaN)", Log1p(nan), nan},
		{"Log1p(+Inf)", Log1p(inf), inf},
		{"Log1p(-1)", Log1p(-1), -inf},
		{"Log1p(-2)", Log1p(-2), nan},
		{"Log1p(-0)", Log1p(math.Copysign(0, -1)), math.Copysign(0, -1)},
		{"Log1p(smallest)", Log1p(smallest), smallest},
		{"Pow(NaN, 0)", Pow(nan, 0), 1},
		{"Pow(1, NaN)", Pow(1, nan), 1},
		{"Pow(2, NaN)", Pow(2, nan), nan},
		{"Pow(NaN, 2)", Pow(nan, 2), nan},
		{"Pow(-2, 0.5)", Pow(-2, 0.5), nan},
		{"Pow(-2, 3)", Pow(-2, 3), -8},
		{"Pow(-2, -2)", Pow(-2, -2), 0.25},
		{"Pow(+0, -1)", Pow(0, -1), inf},
		{"Pow(-0, -1)", Pow(math.Copysign(0, -1), -1), -inf},
		{"Pow(-0, 3)", Pow(math.Copysign(0, -1), 3), math.Copysign(0, -1)},
		{"Pow(-0, 2)", Pow(math.Copysign(0, -1), 2), 0},
		{"Pow(+Inf, -1)", Pow(inf, -1), 0},
		{"Pow(+Inf, 0.5)", Pow(inf, 0.5), inf},
		{"Pow(-Inf, 3)", Pow(-inf, 3), -inf},
		{"Pow(0.5, +Inf)", Pow(0.5, inf), 0},
		{"Pow(0.5, -Inf)", Pow(0.5, -inf), inf},
		{"Pow(-1, +Inf)", Pow(-1, inf), 1},
		{"Pow(2, 1024)", Pow(2, 1024), inf},
		{"Pow(2, -1074)", Pow(2, -1074), smallest},
		{"Pow(2, -1076)", Pow(2, -1076), 0},
		{"Pow(10, 1e19)", Pow(10, 1e19), inf},
		{"Sin(NaN)", Sin(nan), nan},
		{"Sin(+Inf)", Sin(inf), nan},
		{"Sin(-0)", Sin(math.Copysign(0, -1)), math.Copysign(0, -1)},
		{"Sin(smallest)", Sin(smallest), smallest},
		{"Cos(NaN)", Cos(nan), nan},
		{"Cos(-Inf)", Cos(-inf), nan},
		{"Cos(0)", Cos(0), 1},
		{"Cos(smallest)", Cos(smallest), 1},
		{"Erf(NaN)", Erf(nan), nan},
		{"Erf(+Inf)", Erf(inf), 1},
		{"Erf(-Inf)", Erf(-inf), -1},
		{"Erf(-0)", Erf(math.Copysign(0, -1)), math.Copysign(0, -1)},
		{"Erf(6)", Erf(6), 1},
		{"Erf(-30)", Erf(-30), -1},
	}
	for _, c := range cases {
		same := math.Float64bits(c.got) == math.Float64bits(c.want) || math.IsNaN(c.got) && math.IsNaN(c.want)
		if !same {
			t.Errorf("%s = %v (%#x), want %v (%#x)", c.name, c.got, math.Float64bits(c.got), c.want, math.Float64bits(c.want))
		}
	}
}

// TestSplitConstants checks the constants carried in several parts against
// their values from math/big: π/2 (four parts), ln 2 (two), 2/3 and 2/5.
func TestSplitConstants(t *testing.T) {
	refConsts()
	sum := func(parts ...float64) *big.Float {
		s := new(big.Float).SetPrec(1400)
		for _, p := range parts {
			s.Add(s, new(big.Float).SetFloat64(p))
		}
		return s
	}
	relErr := func(got, want *big.Float) float64 {
		d := new(big.Float).SetPrec(1400).Sub(got, want)
		r, _ := d.Quo(d, want).Float64()
		return math.Abs(r)
	}
	halfPi := new(big.Float).SetPrec(1400).Quo(refPi, big.NewFloat(2))
	ratio := func(n, d int64) *big.Float {
		return new(big.Float).SetPrec(1400).Quo(big.NewFloat(float64(n)), big.NewFloat(float64(d)))
	}
	for _, c := range []struct {
		name  string
		got   *big.Float
		want  *big.Float
		bound float64
	}{
		{"π/2", sum(pio2a, pio2b, pio2c, pio2d), halfPi, 0x1p-150},
		{"ln 2", sum(ln2Hi, ln2Lo), refLn2, 0x1p-84},
		{"2/3", sum(0x1.5555555555555p-1, 0x1.5555555555555p-55), ratio(2, 3), 0x1p-106},
		{"2/5", sum(0x1.999999999999ap-2, -0x1.999999999999ap-56), ratio(2, 5), 0x1p-106},
	} {
		if e := relErr(c.got, c.want); e > c.bound {
			t.Errorf("%s: parts off by %g relative, want ≤ %g", c.name, e, c.bound)
		}
	}
	// The first three parts of π/2 have 33 significant bits, so n·part is
	// exact for n < 2^20.
	for _, p := range []float64{pio2a, pio2b, pio2c, ln2Hi} {
		if tz := bitsTrailingZeros(p); tz < 52-33+1 {
			t.Errorf("%v has %d trailing zero bits, want ≥ 20", p, tz)
		}
	}
}

func bitsTrailingZeros(x float64) int {
	m := math.Float64bits(x) & (1<<52 - 1)
	n := 0
	for m&1 == 0 && n < 52 {
		m >>= 1
		n++
	}
	return n
}

// TestAccuracyProperty draws arbitrary float64 arguments (every exponent,
// both signs) and checks each function against its reference and its
// bound; NaN arguments must give NaN.
func TestAccuracyProperty(t *testing.T) {
	for _, fn := range functions {
		t.Run(fn.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				x := rapid.Float64().Draw(t, "x")
				got := fn.f(x)
				if math.IsNaN(x) {
					if !math.IsNaN(got) {
						t.Fatalf("%s(NaN) = %v, want NaN", fn.name, got)
					}
					return
				}
				if !fn.domain(x) {
					return
				}
				if e := ulps(got, fn.ref(x)); !(e <= fn.bound) {
					t.Fatalf("%s(%v) = %v is off by %.3f ulp, bound %v", fn.name, x, got, e, fn.bound)
				}
			})
		})
	}
	t.Run("Pow", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			x := rapid.Float64Range(0x1p-1074, math.MaxFloat64).Draw(t, "x")
			y := rapid.Float64Range(-1e6, 1e6).Draw(t, "y")
			want := refPow(x, y)
			if want.MantExp(nil) > 1024 || x == 1 {
				return // overflows; x = 1 is a special case
			}
			if e := ulps(Pow(x, y), want); !(e <= powMaxULP) {
				t.Fatalf("Pow(%v, %v) = %v is off by %.3f ulp, bound %v", x, y, Pow(x, y), e, powMaxULP)
			}
		})
	})
}
