package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/internal/benchcpu"
)

// expCase is one call of ExpShifted: the values x and the shift m.
type expCase struct {
	x []float32
	m float64
}

// checkExp runs ExpShifted and ExpShiftedSum on every path this machine can
// run and compares each value with Exp(float64(x[j]) - m), and the sum with
// the Go loop's, bit for bit. It stops the test after a few mismatches per
// path.
func checkExp(t *testing.T, cases []expCase) {
	t.Helper()
	for _, pt := range paths {
		bad := 0
		onPath(pt, func() {
			for _, c := range cases {
				e := make([]float64, len(c.x)+1)
				e[len(c.x)] = 42
				ExpShifted(e, c.x, c.m)
				if e[len(c.x)] != 42 {
					t.Fatalf("%s path: ExpShifted of %d values wrote past them", pt.name, len(c.x))
				}
				es := make([]float64, len(c.x))
				sum := ExpShiftedSum(es, c.x, c.m)
				wantSum := 0.0
				for j, v := range c.x {
					d := float64(v) - c.m
					want := Exp(d)
					wantSum += want
					if math.Float64bits(es[j]) != math.Float64bits(want) {
						t.Errorf("%s path: ExpShiftedSum: exp(%v) (bits %#016x) at %d of %d: got bits %#016x, Exp gives %#016x",
							pt.name, d, math.Float64bits(d), j, len(c.x), math.Float64bits(es[j]), math.Float64bits(want))
						bad++
					}
					if math.Float64bits(e[j]) != math.Float64bits(want) {
						t.Errorf("%s path: exp(%v - %v) = exp(%v) (bits %#016x) at %d of %d: got %v (bits %#016x), Exp gives %v (bits %#016x)",
							pt.name, v, c.m, d, math.Float64bits(d), j, len(c.x), e[j], math.Float64bits(e[j]), want, math.Float64bits(want))
						bad++
					}
					if bad >= 10 {
						t.Fatalf("%s path: stopping after %d mismatches", pt.name, bad)
					}
				}
				if math.Float64bits(sum) != math.Float64bits(wantSum) {
					t.Errorf("%s path: ExpShiftedSum of %d values (x from %v, m %v) = %v (bits %#016x), the Go loop's sum %v (bits %#016x)",
						pt.name, len(c.x), c.x[0], c.m, sum, math.Float64bits(sum), wantSum, math.Float64bits(wantSum))
					bad++
				}
			}
		})
	}
}

// specialExps returns float64 inputs at Exp's special values and
// boundaries: NaN, ±Inf, ±0, the ends of the range (expMax, expMin) and
// their neighbours, the edges of k = −1021 and k = 1023 (where the scaling
// changes), the subnormal range, tiny values, and ordinary ones.
func specialExps() []float64 {
	d := []float64{
		math.NaN(), math.Float64frombits(0x7ff8000000000123), math.Float64frombits(0xfff0000000000001),
		math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1),
		0x1p-1074, -0x1p-1074, 0x1p-60, -0x1p-60, 1e-300, -1e-300,
		1, -1, 0.5, -0.5, math.Ln2 / 2, -math.Ln2 / 2, 20, -20, 88.7, -103.9,
		709.78, 709.79, -745.13, -745.14, 1e300, -1e300, math.MaxFloat64, -math.MaxFloat64,
		-708.39, -708.4, -708.3964185322641, -707.7, -709.1, -720, -740, -744.44,
	}
	// Neighbours of the range ends and of the scaling edges, by ulps and
	// by small steps: x·log₂e = −1021.5 and 1023.5 round to the edges of k.
	for _, c := range []float64{expMax, expMin, -1021.5 / log2e, 1023.5 / log2e, -1075.5 / log2e, -1074.5 / log2e} {
		lo, hi := c, c
		for range 20 {
			d = append(d, lo, hi)
			lo, hi = math.Nextafter(lo, math.Inf(-1)), math.Nextafter(hi, math.Inf(1))
		}
		for s := 1e-12; s < 1; s *= 10 {
			d = append(d, c-s, c+s)
		}
	}
	return d
}

// TestExpShiftedSpecial checks every path at Exp's special values and
// boundaries (as 0 − (−d), which is d exactly), each at every lane of a
// vector of ordinary values and in calls of every length up to 19 (the
// tails the Go loop finishes), and with the special value in m instead.
func TestExpShiftedSpecial(t *testing.T) {
	ds := specialExps()
	var cases []expCase
	for _, d := range ds {
		zero := float32(0)
		if d == 0 && math.Signbit(d) {
			zero = float32(math.Copysign(0, -1)) // −0 − (+0) = −0
		}
		for n := 1; n <= 19; n++ {
			for at := 0; at < n; at++ {
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(-j) / 4
				}
				x[at] = zero
				// The others are exp(d − j/4): ordinary when d is.
				cases = append(cases, expCase{x, -d})
			}
		}
		// d as x − m with float32 values of x at each lane among
		// ordinary ones.
		if f := float32(d); float64(f) == d || math.IsNaN(d) {
			for at := range 16 {
				x := make([]float32, 16)
				for j := range x {
					x[j] = float32(j%5) - 2
				}
				x[at] = f
				cases = append(cases, expCase{x, 0})
			}
		}
	}
	// Special float32 values of x with special shifts.
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-30, 700, -700, 745, -745}
	for _, m := range []float64{0, math.Copysign(0, -1), 1, -1, 700, -700, 745, -745, math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat32} {
		cases = append(cases, expCase{xs, m})
	}
	checkExp(t, cases)
}

// TestExpShiftedRandom checks every path on 4 million random inputs, x − m
// for float32 x and float64 m drawn in ranges: the softmax range [−30, 0],
// moderate values, the whole finite range of the exponential and past its
// ends, the subnormal results, and arbitrary bit patterns, in calls of
// random lengths.
func TestExpShiftedRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	ranges := []struct{ lo, hi float64 }{
		{-30, 0}, {-2, 2}, {-750, 712}, {-746, -700}, {700, 711}, {-1e4, 1e4},
	}
	var cases []expCase
	total := 0
	for total < 4_000_000 {
		n := 1 + rng.IntN(300)
		x := make([]float32, n)
		var m float64
		if k := rng.IntN(len(ranges) + 1); k < len(ranges) {
			r := ranges[k]
			// x in [lo, hi], m a small random shift with full float64
			// bits, so that x − m has them too.
			m = rng.Float64() - 0.5
			for j := range x {
				x[j] = float32(r.lo + rng.Float64()*(r.hi-r.lo))
			}
		} else {
			m = math.Float64frombits(rng.Uint64())
			for j := range x {
				x[j] = math.Float32frombits(rng.Uint32())
			}
		}
		cases = append(cases, expCase{x, m})
		total += n
		if len(cases) == 1000 {
			checkExp(t, cases)
			if t.Failed() {
				return
			}
			cases = cases[:0]
		}
	}
	checkExp(t, cases)
}

// TestRowsEmpty checks that no values is no work on every path.
func TestRowsEmpty(t *testing.T) {
	for _, pt := range paths {
		onPath(pt, func() {
			ExpShifted(nil, nil, 0)
			DivToFloat32(nil, nil, 1)
			if s := ExpShiftedSum(nil, nil, 0); s != 0 || math.Signbit(s) {
				t.Errorf("%s path: ExpShiftedSum of nothing is %v, want +0", pt.name, s)
			}
			if m := Max(nil); !math.IsInf(m, -1) {
				t.Errorf("%s path: Max of nothing is %v, want -Inf", pt.name, m)
			}
		})
	}
}

// TestRowsNoAllocs checks that ExpShifted, ExpShiftedSum, DivToFloat32 and
// Max allocate nothing.
func TestRowsNoAllocs(t *testing.T) {
	x, e := make([]float32, 1000), make([]float64, 1000)
	for _, pt := range paths {
		onPath(pt, func() {
			if a := testing.AllocsPerRun(10, func() { ExpShifted(e, x, 1) }); a != 0 {
				t.Errorf("%s path: ExpShifted allocates %v times per call", pt.name, a)
			}
			if a := testing.AllocsPerRun(10, func() { DivToFloat32(x, e, 3) }); a != 0 {
				t.Errorf("%s path: DivToFloat32 allocates %v times per call", pt.name, a)
			}
			if a := testing.AllocsPerRun(10, func() { ExpShiftedSum(e, x, 1) }); a != 0 {
				t.Errorf("%s path: ExpShiftedSum allocates %v times per call", pt.name, a)
			}
			if a := testing.AllocsPerRun(10, func() { Max(x) }); a != 0 {
				t.Errorf("%s path: Max allocates %v times per call", pt.name, a)
			}
		})
	}
}

// BenchmarkExpShifted times ExpShifted on every path, per value, on rows of
// 1024 softmax-like inputs (x − max in [−20, 0]) and, for comparison, on
// inputs whose vectors all take the long path (a −Inf in each); and
// softmax's row (Max, ExpShiftedSum, DivToFloat32) on the first. By wall
// clock and, where it can be read, by the process's CPU time (steadier on a
// shared machine).
func BenchmarkExpShifted(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 1024
	x, hidden, e := make([]float32, n), make([]float32, n), make([]float64, n)
	for j := range x {
		x[j] = -20 * rng.Float32()
		hidden[j] = x[j]
		if j%4 == 0 {
			hidden[j] = float32(math.Inf(-1))
		}
	}
	y := make([]float32, n)
	for _, in := range []struct {
		name string
		f    func()
	}{
		{"normal", func() { ExpShifted(e, x, 0.5) }},
		{"hidden", func() { ExpShifted(e, hidden, 0.5) }},
		{"softmax", func() {
			m := Max(x)
			DivToFloat32(y, e, ExpShiftedSum(e, x, m))
		}},
	} {
		for _, pt := range paths {
			b.Run(in.name+"/"+pt.name, func(b *testing.B) {
				cpu0 := benchcpu.Process()
				onPath(pt, func() {
					for b.Loop() {
						in.f()
					}
				})
				cpu := benchcpu.Process() - cpu0
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/exp")
				if cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/exp")
				}
			})
		}
	}
}

// TestDivToFloat32 checks every path against the Go loop, bit for bit:
// quotients of special values (NaN, ±Inf, ±0, subnormal, the float32
// overflow and subnormal ranges and their edges) by special divisors, at
// every length up to 19, and 2 million random ones across magnitudes.
func TestDivToFloat32(t *testing.T) {
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3,
		0x1p-1074, 0x1p-1022, math.MaxFloat64, math.MaxFloat32, math.Nextafter(math.MaxFloat32, 0),
		0x1.fffffefffffffp127, 0x1.ffffffp127, 0x1p-149, 0x1p-150, 0x1.0000000000001p-150, 0x1p-126, 0x1.fffffp-127, 1e-45, 3e38, 4e38}
	divisors := []float64{1, -1, 3, 0.7, 1e-300, 1e300, 0, math.Copysign(0, -1), math.Inf(1), math.NaN(), 0x1p-1074, 1024.5}
	rng := rand.New(rand.NewPCG(5, 6))
	type divCase struct {
		e []float64
		d float64
	}
	var cases []divCase
	for _, d := range divisors {
		for n := 1; n <= 19; n++ {
			e := make([]float64, n)
			for j := range e {
				e[j] = specials[(j+n)%len(specials)] * float64(1+j%3)
			}
			cases = append(cases, divCase{e, d})
		}
		cases = append(cases, divCase{specials, d})
	}
	for total := 0; total < 2_000_000; {
		n := 1 + rng.IntN(300)
		e := make([]float64, n)
		scale := math.Ldexp(1, rng.IntN(600)-300)
		for j := range e {
			e[j] = rng.Float64() * scale
		}
		if rng.IntN(10) == 0 {
			for j := range e {
				e[j] = math.Float64frombits(rng.Uint64())
			}
		}
		d := math.Ldexp(0.5+rng.Float64(), rng.IntN(600)-300)
		cases = append(cases, divCase{e, d})
		total += n
	}
	for _, pt := range paths {
		bad := 0
		onPath(pt, func() {
			for _, c := range cases {
				dst := make([]float32, len(c.e)+1)
				dst[len(c.e)] = 42
				DivToFloat32(dst[:len(c.e)], c.e, c.d)
				if dst[len(c.e)] != 42 {
					t.Fatalf("%s path: DivToFloat32 of %d values wrote past them", pt.name, len(c.e))
				}
				for j, v := range c.e {
					want := float32(v / c.d)
					if math.Float32bits(dst[j]) != math.Float32bits(want) {
						t.Errorf("%s path: float32(%v / %v) (bits %#016x / %#016x) at %d of %d: got %v (bits %#08x), the Go loop gives %v (bits %#08x)",
							pt.name, v, c.d, math.Float64bits(v), math.Float64bits(c.d), j, len(c.e), dst[j], math.Float32bits(dst[j]), want, math.Float32bits(want))
						if bad++; bad == 10 {
							t.Fatalf("%s path: stopping after %d mismatches", pt.name, bad)
						}
					}
				}
			}
		})
	}
}

// maxLoop is the loop Max must agree with.
func maxLoop(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		if f := float64(v); f > m {
			m = f
		}
	}
	return m
}

// TestMax checks Max on every path against the loop, bit for bit: rows of
// every length up to 70 drawn from special values (NaN, ±Inf, ±0, the
// float32 extremes) and ordinary ones, rows of zeros of both signs in every
// order, all-NaN rows, and 200000 random rows.
func TestMax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	specials := []float32{nan, inf, -inf, 0, negZero, 1, -1, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 3.5, -7}
	rng := rand.New(rand.NewPCG(8, 9))
	var rows [][]float32
	for n := 0; n <= 70; n++ {
		for range 20 {
			x := make([]float32, n)
			for j := range x {
				x[j] = specials[rng.IntN(len(specials))]
			}
			rows = append(rows, x)
			// The same with only non-positive values, so that zeros
			// and −Inf are often the maximum.
			y := make([]float32, n)
			for j := range y {
				y[j] = -float32(math.Abs(float64(x[j])))
				if j%3 == 0 {
					y[j] = [...]float32{0, negZero, nan}[rng.IntN(3)]
				}
			}
			rows = append(rows, y)
		}
		all := make([]float32, n)
		for j := range all {
			all[j] = nan
		}
		rows = append(rows, all)
		// One zero of each sign at every pair of places among −1s.
		for a := 0; a < n && n <= 40; a++ {
			for b := 0; b < n; b++ {
				if a == b {
					continue
				}
				z := make([]float32, n)
				for j := range z {
					z[j] = -1
				}
				z[a], z[b] = 0, negZero
				rows = append(rows, z)
			}
		}
	}
	for range 200_000 {
		x := make([]float32, 1+rng.IntN(300))
		for j := range x {
			x[j] = float32(rng.NormFloat64() * 10)
			if rng.IntN(50) == 0 {
				x[j] = specials[rng.IntN(len(specials))]
			}
		}
		rows = append(rows, x)
	}
	for _, pt := range paths {
		onPath(pt, func() {
			bad := 0
			for _, x := range rows {
				got, want := Max(x), maxLoop(x)
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Errorf("%s path: Max(%v) = %v (bits %#016x), the loop gives %v (bits %#016x)",
						pt.name, x, got, math.Float64bits(got), want, math.Float64bits(want))
					if bad++; bad == 10 {
						t.Fatalf("%s path: stopping after %d mismatches", pt.name, bad)
					}
				}
			}
		})
	}
}
