package elem

import (
	"flag"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// Bounds on the error in ulps against the math/big references, set from the
// maxima the tests measure (docs/tolerances.md, "Elementary functions").
const (
	expMaxULP   = 1
	logMaxULP   = 1
	log1pMaxULP = 1
	powMaxULP   = 1
	sinMaxULP   = 1
	cosMaxULP   = 1
	erfMaxULP   = 1
)

// samplesFlag sets how many arguments TestAccuracy and TestPowAccuracy draw
// per range (three kinds each); docs/tolerances.md gives the maxima measured
// with -elem.samples=20000.
var samplesFlag = flag.Int("elem.samples", 1500, "arguments per sampled range in the accuracy tests")

// function is one function under test with its reference.
type function struct {
	name   string
	f      func(float64) float64
	ref    func(float64) *big.Float
	bound  float64
	domain func(float64) bool // arguments with a finite, representable result
}

var functions = []function{
	{"Exp", Exp, func(x float64) *big.Float { return refExp(bf(x)) }, expMaxULP,
		func(x float64) bool { return x >= -745.2 && x <= 709.78 }},
	{"Log", Log, func(x float64) *big.Float { return refLog(bf(x)) }, logMaxULP,
		func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }},
	{"Log1p", Log1p, refLog1p, log1pMaxULP,
		func(x float64) bool { return x > -1 && !math.IsInf(x, 0) }},
	{"Sin", Sin, func(x float64) *big.Float { s, _ := refSinCos(x); return s }, sinMaxULP,
		func(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }},
	{"Cos", Cos, func(x float64) *big.Float { _, c := refSinCos(x); return c }, cosMaxULP,
		func(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }},
	{"Erf", Erf, refErf, erfMaxULP,
		func(x float64) bool { return math.Abs(x) < 6.5 }},
}

// samples returns n arguments spread over [lo, hi]: an even grid, uniform
// draws and draws uniform in the exponent.
func samples(rng *rand.Rand, lo, hi float64, n int) []float64 {
	xs := make([]float64, 0, 3*n)
	for i := range n {
		xs = append(xs, lo+(hi-lo)*float64(i)/float64(n-1))
		xs = append(xs, lo+(hi-lo)*rng.Float64())
	}
	for range n {
		// |x| log-uniform over the range's magnitudes, either sign that
		// the range holds.
		a, b := math.Max(math.Abs(lo), math.Abs(hi)), 0x1p-1074
		x := math.Exp2(math.Log2(b) + (math.Log2(a)-math.Log2(b))*rng.Float64())
		if lo < 0 && (hi <= 0 || rng.IntN(2) == 0) {
			x = -x
		}
		if x >= lo && x <= hi {
			xs = append(xs, x)
		}
	}
	return xs
}

// worst measures the largest error of fn over xs.
func worst(fn function, xs []float64) (maxErr, at float64) {
	for _, x := range xs {
		if !fn.domain(x) {
			continue
		}
		if e := ulps(fn.f(x), fn.ref(x)); e > maxErr || math.IsNaN(e) {
			maxErr, at = e, x
		}
	}
	return maxErr, at
}

// ranges are the intervals each function is sampled over: the whole domain
// and where the reduction or the approximation changes.
var ranges = map[string][][2]float64{
	"Exp":   {{-745.2, 709.78}, {-1, 1}, {-0x1p-20, 0x1p-20}, {-745.2, -708}, {700, 709.78}},
	"Log":   {{0x1p-1074, 0x1p-1022}, {0.5, 2}, {1 - 0x1p-20, 1 + 0x1p-20}, {0x1p-1022, math.MaxFloat64}},
	"Log1p": {{-1 + 0x1p-52, 1}, {-0x1p-20, 0x1p-20}, {-0.5, 0.5}, {1, math.MaxFloat64}},
	"Sin":   {{-10, 10}, {-0x1p-20, 0x1p-20}, {-1e6, 1e6}, {-math.MaxFloat64, math.MaxFloat64}},
	"Cos":   {{-10, 10}, {-0x1p-20, 0x1p-20}, {-1e6, 1e6}, {-math.MaxFloat64, math.MaxFloat64}},
	"Erf":   {{-6.5, 6.5}, {-1.3, 1.3}, {0.8, 0.9}, {1.2, 1.3}, {2.8, 2.9}, {-0x1p-20, 0x1p-20}},
}

// TestAccuracy compares every function with its 300-bit reference over dense
// samples and reports the largest error in ulps.
func TestAccuracy(t *testing.T) {
	n := *samplesFlag
	if testing.Short() {
		n = min(n, 300)
	}
	for _, fn := range functions {
		t.Run(fn.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var maxErr, at float64
			for _, r := range ranges[fn.name] {
				if e, x := worst(fn, samples(rng, r[0], r[1], n)); e > maxErr || math.IsNaN(e) {
					maxErr, at = e, x
				}
			}
			t.Logf("%s: max error %.3f ulp at %v", fn.name, maxErr, at)
			if !(maxErr <= fn.bound) {
				t.Errorf("%s(%v) is off by %.3f ulp, bound %v", fn.name, at, maxErr, fn.bound)
			}
		})
	}
}

// TestPowAccuracy compares Pow with its 300-bit reference over bases and
// exponents whose power is a normal float64, and over RoPE's
// base^(−2j/d_head).
func TestPowAccuracy(t *testing.T) {
	n := 10 * *samplesFlag
	if testing.Short() {
		n = min(n, 2000)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var maxErr float64
	var at [2]float64
	check := func(x, y float64) {
		if e := ulps(Pow(x, y), refPow(x, y)); e > maxErr || math.IsNaN(e) {
			maxErr, at = e, [2]float64{x, y}
		}
	}
	for range n {
		x := math.Exp2(-60 + 120*rng.Float64())
		y := (2*rng.Float64() - 1) * 700 / math.Abs(math.Log(x)) // |y·log x| ≤ 700
		check(x, y)
		check(x, math.Round(16*rng.Float64()-8))
	}
	for _, base := range []float64{10000, 500000} {
		for _, d := range []int{2, 4, 8, 16, 32, 64, 128} {
			for j := range d / 2 {
				check(base, -2*float64(j)/float64(d))
			}
		}
	}
	t.Logf("Pow: max error %.3f ulp at %v", maxErr, at)
	if !(maxErr <= powMaxULP) {
		t.Errorf("Pow(%v, %v) is off by %.3f ulp, bound %v", at[0], at[1], maxErr, powMaxULP)
	}
}
