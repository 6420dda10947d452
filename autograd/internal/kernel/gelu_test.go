package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/internal/benchcpu"
)

// geluSpecials lists the inputs where a SIMD kernel is most likely to part
// from GELUEval: zeros, infinities, NaNs of several payloads (quiet and
// signalling, either sign), the extremes of the normal and subnormal
// ranges, and 40 float32 values on either side of every piece boundary
// (±8 included) with the boundaries themselves.
func geluSpecials() []float32 {
	bits := []uint32{
		0x00000000, 0x80000000, // ±0
		0x7F800000, 0xFF800000, // ±Inf
		0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFE54321, // quiet NaNs
		0x7F800001, 0xFF800001, 0x7FA00000, 0xFF9ABCDE, // signalling NaNs
		0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, // subnormals
		0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, // smallest and largest normals
	}
	var xs []float32
	for _, b := range bits {
		xs = append(xs, math.Float32frombits(b))
	}
	for i := 0; i <= GELUPieces; i++ {
		b := float32(GELULo + float64(i)/GELUPerUnit)
		lo, hi := b, b
		for range 40 {
			lo = math.Nextafter32(lo, float32(math.Inf(-1)))
			hi = math.Nextafter32(hi, float32(math.Inf(1)))
			xs = append(xs, lo, hi, -lo, -hi)
		}
		xs = append(xs, b, -b)
	}
	return append(xs, 1e-30, -1e-30, 16, -16, 1e30, -1e30, 2.5e9, -2.5e9)
}

// geluInputs returns the inputs of the bit-identity tests: the special
// values, every stride-th float32 bit pattern of magnitude at most 9 (both
// signs), and random values: uniform in [−9, 9], and uniform bit patterns
// (every exponent, NaNs included).
func geluInputs(stride uint32, random int) []float32 {
	xs := geluSpecials()
	limit := math.Float32bits(9)
	for b := uint32(0); b <= limit; b += stride {
		xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|1<<31))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range random / 2 {
		xs = append(xs, float32(18*rng.Float32())-9, math.Float32frombits(rng.Uint32()))
	}
	return xs
}

// geluGrads returns len(x) values for g or dx: mostly uniform in [−2, 2],
// and one in eight a special value (NaNs of other payloads than x's,
// infinities, zeros), so that NaNs, infinities and zeros meet in the
// backward pass's multiply and add.
func geluGrads(rng *rand.Rand, n int) []float32 {
	specials := []uint32{0x7FC0BEEF, 0xFFC0CAFE, 0x7F800002, 0x7F800000, 0xFF800000, 0, 0x80000000}
	v := make([]float32, n)
	for i := range v {
		if rng.IntN(8) == 0 {
			v[i] = math.Float32frombits(specials[rng.IntN(len(specials))])
		} else {
			v[i] = float32(4*rng.Float32()) - 2
		}
	}
	return v
}

// sameBits reports the first few indices where got and want differ, with
// the input and, if more is not nil, more(i). Every value but a NaN is
// compared bit for bit (±0, subnormals, ±Inf and every finite value); a
// NaN only has to meet a NaN, of any sign and payload: when two NaNs meet
// in an add or multiply, IEEE 754 leaves open whose payload comes out (x86
// keeps the first operand's), and the Go compiler may swap the operands of
// a commutative operation, as it does in the Go loops under -race, so the
// payload says nothing about the kernel's arithmetic.
func sameBits(t *testing.T, what string, x, got, want []float32, more func(i int) string) {
	t.Helper()
	bad := 0
	for i := range want {
		if g, w := math.Float32bits(got[i]), math.Float32bits(want[i]); g != w && !(got[i] != got[i] && want[i] != want[i]) {
			if bad < 10 {
				extra := ""
				if more != nil {
					extra = more(i)
				}
				t.Errorf("%s: x[%d] = %v (%#08x)%s: got %v (%#08x), want %v (%#08x)",
					what, i, x[i], math.Float32bits(x[i]), extra, got[i], g, want[i], w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ", what, bad, len(want))
	}
}

// TestGELUPathsBitIdentical checks GELUForward and GELUBackward on every path
// this machine runs against the scalar loops (GELUEval), bit for bit but for
// a NaN's sign and payload (sameBits): over
// the special values, a sweep of float32 bit patterns in [−9, 9] and
// millions of random inputs, with gradients and accumulators that include
// NaNs, infinities and zeros; also slices whose length is not a multiple of
// the lanes (the Go loop finishes them), and y = x in place.
func TestGELUPathsBitIdentical(t *testing.T) {
	stride, random := uint32(257), 2<<20
	if testing.Short() {
		stride, random = 1531, 1<<20
	}
	x := geluInputs(stride, random)
	rng := rand.New(rand.NewPCG(5, 6))
	g, dx0 := geluGrads(rng, len(x)), geluGrads(rng, len(x))
	wantY := make([]float32, len(x))
	geluForwardGo(wantY, x)
	wantDx := append([]float32(nil), dx0...)
	geluBackwardGo(wantDx, g, x)
	t.Logf("%d inputs", len(x))
	gdx := func(i int) string {
		return fmt.Sprintf(", g = %v (%#08x), dx = %v (%#08x)", g[i], math.Float32bits(g[i]), dx0[i], math.Float32bits(dx0[i]))
	}

	y, dx := make([]float32, len(x)), make([]float32, len(x))
	for _, pt := range paths {
		onPath(pt, func() {
			for _, n := range []int{len(x), len(x) - 5, 37, 16, 15, 8, 7, 1, 0} {
				clear(y)
				copy(dx, dx0)
				GELUForward(y[:n], x[:n])
				GELUBackward(dx[:n], g[:n], x[:n])
				sameBits(t, fmt.Sprintf("%s forward, n = %d", pt.name, n), x[:n], y[:n], wantY[:n], nil)
				sameBits(t, fmt.Sprintf("%s backward, n = %d", pt.name, n), x[:n], dx[:n], wantDx[:n], gdx)
			}
			copy(y, x)
			GELUForward(y, y)
			sameBits(t, pt.name+" forward in place", x, y, wantY, nil)
		})
	}
}

// TestGELUKernelsAgreeWithEval checks the Go loops against GELUEval itself,
// and the special cases of GELUEval: 0 below GELULo (so −0 for negative
// finite x and NaN for −Inf), 1 from −GELULo on, NaN for NaN.
func TestGELUKernelsAgreeWithEval(t *testing.T) {
	xs := geluSpecials()
	y := make([]float32, len(xs))
	dx := make([]float32, len(xs))
	g := make([]float32, len(xs))
	for i := range g {
		g[i] = 1
	}
	geluForwardGo(y, xs)
	geluBackwardGo(dx, g, xs)
	for i, x := range xs {
		if w := x * GELUEval(x, false); math.Float32bits(y[i]) != math.Float32bits(w) {
			t.Errorf("forward at %v: %v, want %v", x, y[i], w)
		}
		if w := 0 + GELUEval(x, true); math.Float32bits(dx[i]) != math.Float32bits(w) {
			t.Errorf("backward at %v: %v, want %v", x, dx[i], w)
		}
	}
	inf := float32(math.Inf(1))
	for _, c := range []struct{ x, y float32 }{
		{-inf, float32(math.NaN())}, {-9, float32(math.Copysign(0, -1))}, {8, 8}, {inf, inf},
		{float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1))},
	} {
		y := make([]float32, 1)
		geluForwardGo(y, []float32{c.x})
		if math.Float32bits(y[0]) != math.Float32bits(c.y) && !(y[0] != y[0] && c.y != c.y) {
			t.Errorf("GELU(%v) = %v (%#08x), want %v (%#08x)", c.x, y[0], math.Float32bits(y[0]), c.y, math.Float32bits(c.y))
		}
	}
}

// TestGELUNoAllocs checks that the slice kernels do not allocate.
func TestGELUNoAllocs(t *testing.T) {
	x := make([]float32, 1000)
	y := make([]float32, len(x))
	for _, pt := range paths {
		onPath(pt, func() {
			if a := testing.AllocsPerRun(10, func() {
				GELUForward(y, x)
				GELUBackward(y, x, x)
			}); a != 0 {
				t.Errorf("%s: %v allocations per call", pt.name, a)
			}
		})
	}
}

// BenchmarkGELU times GELUForward and GELUBackward on every path over 4096
// elements (in L1) with inputs spread over [−10, 10], and reports ns per
// element of wall-clock time and, where it can be read, of the process's CPU
// time (the steadier figure on a shared machine; run with GOMAXPROCS=1).
func BenchmarkGELU(b *testing.B) {
	const n = 4096
	x, g, y := make([]float32, n), make([]float32, n), make([]float32, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(20*rng.Float32()) - 10
		g[i] = float32(2*rng.Float32()) - 1
	}
	for _, pt := range paths {
		for _, dir := range []string{"forward", "backward"} {
			b.Run(pt.name+"/"+dir, func(b *testing.B) {
				onPath(pt, func() {
					b.ReportAllocs()
					cpu0 := benchcpu.Process()
					for b.Loop() {
						if dir == "forward" {
							GELUForward(y, x)
						} else {
							GELUBackward(y, g, x)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
					if cpu := benchcpu.Process() - cpu0; cpu > 0 {
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/n, "cpu-ns/elem")
					}
				})
			})
		}
	}
}
