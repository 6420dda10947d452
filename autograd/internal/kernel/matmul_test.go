package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/modref/modref/internal/race"
)

// tol bounds the error of every kernel on every path:
//
//	|c32[i,j] - c64[i,j]| <= tol · Σ_p |a[i,p]·b[p,j]|
//
// where c64 is the product computed in float64. It comes from
// TestMeasureError (go test -run MeasureError -v), which multiplies
// 20 random 37×k by k×41 products per k in {1, 2, 3, 8, 33, 100, 257, 512,
// 1000, 2048}, inputs uniform in [-1, 1), for each kernel on each path. In
// units of float32's roundoff u = 2⁻²⁴ ≈ 5.96e-8 the largest errors observed
// (AMD Zen 4, 2026-11-22) were 1.0u at k = 1, about 2.4u at k = 3, and at
// most 4.95u beyond: 4.95u (2.95e-7) for NN on the avx2 path at k = 100;
// avx512 at most 4.52u, the go path at most 4.12u. (The SIMD paths give
// the same bits on the same data; they differ here because each path draws
// its own data.) The maximum does not grow with k in this range: the
// classical bound k·u is far from what random data reaches. tol = 8u
// (4.8e-7) is 1.6 times the largest observation. It is meant for k <= 2048,
// the measured range.
const tol = 8 * 0x1p-24

// kernels lists the three products under test.
var kernels = []struct {
	name string
	f    func(c, a, b []float32, m, k, n int)
	o    op
}{
	{"NN", MatMulNN, opNN},
	{"NT", MatMulNT, opNT},
	{"TN", MatMulTN, opTN},
}

// onPath runs f with the kernels on path pt and restores the default.
func onPath(pt *path, f func()) {
	defer func(old *path) { active = old }(active)
	active = pt
	f()
}

// ref returns the float64 product for op o and, per element, Σ_p |a·b|.
func ref(o op, a, b []float32, m, k, n int) (c, mag []float64) {
	c, mag = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, g float64
			for p := 0; p < k; p++ {
				var x, y float64
				switch o {
				case opNN:
					x, y = float64(a[i*k+p]), float64(b[p*n+j])
				case opNT:
					x, y = float64(a[i*k+p]), float64(b[j*k+p])
				case opTN:
					x, y = float64(a[p*m+i]), float64(b[p*n+j])
				}
				s += x * y
				g += math.Abs(x * y)
			}
			c[i*n+j], mag[i*n+j] = s, g
		}
	}
	return c, mag
}

// fill sets x to values uniform in [-scale, scale).
func fill(rng *rand.Rand, x []float32, scale float64) {
	for i := range x {
		x[i] = float32((2*rng.Float64() - 1) * scale)
	}
}

// worstError returns the largest |c - c64| / Σ|ab| and where it occurs. An
// element whose Σ|ab| is 0 must be exactly 0; if not, the ratio is +Inf.
func worstError(c []float32, c64, mag []float64) (worst float64, at int) {
	for i := range c {
		d := math.Abs(float64(c[i]) - c64[i])
		if d == 0 {
			continue
		}
		r := math.Inf(1)
		if mag[i] > 0 {
			r = d / mag[i]
		}
		if r > worst {
			worst, at = r, i
		}
	}
	return worst, at
}

// worstRatio is worstError without the index.
func worstRatio(c []float32, c64, mag []float64) float64 {
	w, _ := worstError(c, c64, mag)
	return w
}

// TestMeasureError is the measurement tol comes from: it logs, per kernel,
// path and k, the largest observed error relative to Σ|ab| (also in units of
// u = 2⁻²⁴), and fails if one exceeds tol.
func TestMeasureError(t *testing.T) {
	race.SkipShort(t, "20 products for each kernel, path and k, checked against float64 sums in the test, which the race detector slows (90 s of the package's 170 at a load of 4-9); the pool's goroutines run under it in TestChains, TestSplits and TestGOMAXPROCS; go test ./autograd/internal/kernel runs it")
	const m, n, trials = 37, 41, 20
	rng := rand.New(rand.NewPCG(17, 7))
	for _, kn := range kernels {
		for _, pt := range paths {
			onPath(pt, func() {
				for _, k := range []int{1, 2, 3, 8, 33, 100, 257, 512, 1000, 2048} {
					worst := 0.0
					for range trials {
						a, b := make([]float32, m*k), make([]float32, k*n)
						fill(rng, a, 1)
						fill(rng, b, 1)
						c := make([]float32, m*n)
						kn.f(c, a, b, m, k, n)
						c64, mag := ref(kn.o, a, b, m, k, n)
						worst = max(worst, worstRatio(c, c64, mag))
					}
					t.Logf("%s/%s k=%d: max |c32-c64|/Σ|ab| = %.3g = %.2fu", kn.name, pt.name, k, worst, worst/0x1p-24)
					if worst > tol {
						t.Errorf("%s/%s k=%d: error %.3g exceeds tol %.3g", kn.name, pt.name, k, worst, tol)
					}
				}
			})
		}
	}
}

// TestAgainstFloat64 checks every kernel on both paths against the float64
// product on random shapes (including 1×1, k = 0 and sizes that are not
// multiples of 8 or 32) and magnitudes from 2⁻³⁰ to 2⁵⁰ (products up to 2¹⁰⁰, sums of up to 300 of them
// stay finite).
func TestAgainstFloat64(t *testing.T) {
	for _, kn := range kernels {
		for _, pt := range paths {
			t.Run(kn.name+"/"+pt.name, func(t *testing.T) {
				rapid.Check(t, func(t *rapid.T) {
					m := rapid.IntRange(1, 200).Draw(t, "m")
					k := rapid.IntRange(0, 300).Draw(t, "k")
					n := rapid.IntRange(1, 90).Draw(t, "n")
					scales := []float64{1, 0x1p-30, 0x1p30, 0x1p50}
					sa := rapid.SampledFrom(scales).Draw(t, "scaleA")
					sb := rapid.SampledFrom(scales).Draw(t, "scaleB")
					rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
					a, b := make([]float32, m*k), make([]float32, k*n)
					fill(rng, a, sa)
					fill(rng, b, sb)
					c := make([]float32, m*n)
					for i := range c {
						c[i] = float32(math.NaN()) // must be overwritten
					}
					onPath(pt, func() { kn.f(c, a, b, m, k, n) })
					c64, mag := ref(kn.o, a, b, m, k, n)
					if w, at := worstError(c, c64, mag); w > tol {
						t.Fatalf("m=%d k=%d n=%d: c[%d,%d] = %g, float64 gives %g: |diff| = %g > tol·Σ|ab| = %g",
							m, k, n, at/n, at%n, c[at], c64[at], math.Abs(float64(c[at])-c64[at]), tol*mag[at])
					}
				})
			})
		}
	}
}

// TestPathsAgree checks that every path agrees with the Go path within
// 2·tol·Σ|ab|, which follows from both being within tol of the exact
// product, and that the SIMD paths agree with one another bit for bit: each
// element is the same chain of fused multiply-adds on every SIMD path.
func TestPathsAgree(t *testing.T) {
	if len(paths) == 1 {
		t.Skip("only the Go path runs on this CPU")
	}
	for _, kn := range kernels {
		t.Run(kn.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				m := rapid.IntRange(1, 100).Draw(t, "m")
				k := rapid.IntRange(1, 600).Draw(t, "k")
				n := rapid.IntRange(1, 100).Draw(t, "n")
				rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 2))
				a, b := make([]float32, m*k), make([]float32, k*n)
				fill(rng, a, 1)
				fill(rng, b, 1)
				cg := make([]float32, m*n)
				onPath(goPath, func() { kn.f(cg, a, b, m, k, n) })
				_, mag := ref(kn.o, a, b, m, k, n)
				var simd []float32
				for _, pt := range paths[:len(paths)-1] {
					c := make([]float32, m*n)
					onPath(pt, func() { kn.f(c, a, b, m, k, n) })
					for i := range c {
						if d := math.Abs(float64(c[i]) - float64(cg[i])); d > 2*tol*mag[i] {
							t.Fatalf("m=%d k=%d n=%d: c[%d,%d]: %s %g, go %g, |diff| = %g > 2·tol·Σ|ab| = %g",
								m, k, n, i/n, i%n, pt.name, c[i], cg[i], d, 2*tol*mag[i])
						}
					}
					if simd == nil {
						simd = c
					} else if d := firstDiff(c, simd); d >= 0 {
						t.Fatalf("m=%d k=%d n=%d: c[%d,%d]: %s %x, %s %x", m, k, n, d/n, d%n,
							pt.name, math.Float32bits(c[d]), paths[0].name, math.Float32bits(simd[d]))
					}
				}
			})
		})
	}
}

// firstDiff returns the first index where x and y differ in bits, or -1.
func firstDiff(x, y []float32) int {
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return i
		}
	}
	return -1
}

// TestBatchIndependence checks that a row of the result has the same bits
// whatever batch it is computed in: for NN and NT row i depends only on row
// i of a, for TN on column i of a. The full product is large enough to be
// shared with the worker pool, the sub-batches range from one row up.
func TestBatchIndependence(t *testing.T) {
	const bigM, k, n = 203, 301, 75 // k spans two runs of kBlock
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kn := range kernels {
		for _, pt := range paths {
			t.Run(kn.name+"/"+pt.name, func(t *testing.T) {
				a, b := make([]float32, bigM*k), make([]float32, k*n)
				fill(rng, a, 1)
				fill(rng, b, 1)
				full := make([]float32, bigM*n)
				onPath(pt, func() { kn.f(full, a, b, bigM, k, n) })
				for _, sub := range [][2]int{{0, 1}, {5, 1}, {202, 1}, {0, 2}, {7, 3}, {1, 4}, {13, 17}, {40, 49}, {3, 97}, {100, 103}} {
					s, mm := sub[0], sub[1]
					var as []float32
					if kn.o == opTN { // a is k×bigM: take columns s..s+mm
						as = make([]float32, k*mm)
						for p := 0; p < k; p++ {
							copy(as[p*mm:(p+1)*mm], a[p*bigM+s:p*bigM+s+mm])
						}
					} else {
						as = a[s*k : (s+mm)*k]
					}
					c := make([]float32, mm*n)
					onPath(pt, func() { kn.f(c, as, b, mm, k, n) })
					if d := firstDiff(c, full[s*n:(s+mm)*n]); d >= 0 {
						t.Fatalf("rows %d..%d alone: row %d col %d = %x, in the full batch %x",
							s, s+mm, s+d/n, d%n, math.Float32bits(c[d]), math.Float32bits(full[s*n+d]))
					}
				}
			})
		}
	}
}

// transpose returns the c×r transpose of the r×c matrix x.
func transpose(x []float32, r, c int) []float32 {
	t := make([]float32, len(x))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			t[j*r+i] = x[i*c+j]
		}
	}
	return t
}

// TestTransposedOperands checks that MatMulTN(a, b) has the same bits as
// MatMulNN(aᵀ, b), and MatMulNT(a, b) the same bits as MatMulNN(a, bᵀ): all
// three reduce over k by the same sequence of operations. n = 300 spans two
// NT panels, n = 257 would leave a panel of one column, n = 1 is a
// matrix-vector product.
func TestTransposedOperands(t *testing.T) {
	const m, k = 70, 301 // k spans two runs of kBlock
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{300, 257, 1} {
		for _, pt := range paths {
			// TN: a is k×m.
			a, b := make([]float32, k*m), make([]float32, k*n)
			fill(rng, a, 1)
			fill(rng, b, 1)
			got, want := make([]float32, m*n), make([]float32, m*n)
			onPath(pt, func() {
				MatMulTN(got, a, b, m, k, n)
				MatMulNN(want, transpose(a, k, m), b, m, k, n)
			})
			if d := firstDiff(got, want); d >= 0 {
				t.Errorf("%s n=%d: c[%d,%d]: TN %g, NN of aᵀ %g", pt.name, n, d/n, d%n, got[d], want[d])
			}
			// NT: a is m×k, b is n×k.
			a, b = make([]float32, m*k), make([]float32, n*k)
			fill(rng, a, 1)
			fill(rng, b, 1)
			onPath(pt, func() {
				MatMulNT(got, a, b, m, k, n)
				MatMulNN(want, a, transpose(b, n, k), m, k, n)
			})
			if d := firstDiff(got, want); d >= 0 {
				t.Errorf("%s n=%d: c[%d,%d]: NT %g, NN of bᵀ %g", pt.name, n, d/n, d%n, got[d], want[d])
			}
		}
	}
}

// TestGOMAXPROCS checks that results have the same bits with GOMAXPROCS 1
// (the caller alone), 2 and 4.
func TestGOMAXPROCS(t *testing.T) {
	const m, k, n = 301, 257, 65 // m·k·n is well above parallelMinFlops
	rng := rand.New(rand.NewPCG(8, 9))
	a, b := make([]float32, m*k), make([]float32, k*n)
	fill(rng, a, 1)
	fill(rng, b, 1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, kn := range kernels {
		for _, pt := range paths {
			var first []float32
			for _, procs := range []int{1, 2, 4} {
				runtime.GOMAXPROCS(procs)
				c := make([]float32, m*n)
				onPath(pt, func() { kn.f(c, a, b, m, k, n) })
				if first == nil {
					first = c
					continue
				}
				if d := firstDiff(c, first); d >= 0 {
					t.Errorf("%s/%s: GOMAXPROCS=%d: c[%d,%d] = %g, with 1 proc %g",
						kn.name, pt.name, procs, d/n, d%n, c[d], first[d])
				}
			}
		}
	}
}

// TestConcurrentCallers checks that kernels called from several goroutines at
// once, sharing the worker pool, give the same bits as calls made one at a
// time.
func TestConcurrentCallers(t *testing.T) {
	const callers, rounds = 6, 5
	type problem struct {
		m, k, n int
		a, b    []float32
		want    [3][]float32
	}
	rng := rand.New(rand.NewPCG(10, 11))
	probs := make([]problem, callers)
	for g := range probs {
		p := &probs[g]
		p.m, p.k, p.n = 60+37*g, 90+11*g, 50+13*g
		p.a, p.b = make([]float32, p.m*p.k), make([]float32, p.k*p.n)
		fill(rng, p.a, 1)
		fill(rng, p.b, 1)
		for x, kn := range kernels {
			p.want[x] = make([]float32, p.m*p.n)
			kn.f(p.want[x], p.a, p.b, p.m, p.k, p.n)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds*len(kernels))
	for g := range probs {
		wg.Go(func() {
			p := &probs[g]
			c := make([]float32, p.m*p.n)
			for range rounds {
				for x, kn := range kernels {
					kn.f(c, p.a, p.b, p.m, p.k, p.n)
					if d := firstDiff(c, p.want[x]); d >= 0 {
						errs <- fmt.Sprintf("caller %d %s: element %d differs", g, kn.name, d)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestNoAllocs checks that a product shared with the worker pool allocates
// nothing once the pool is warm, and that a garbage collection does not make
// it allocate its jobs or packing space again (as a sync.Pool would). A new
// job comes with new packing space, and for this shape the caller's packed
// panel of a alone is mc·k·4 = 96 KiB. The runtime itself may allocate a few
// KiB on the first blocking operations after a collection (wait records
// whose cache a collection empties, and on a loaded machine a new thread
// for a waking worker: 5432 bytes were seen); that is what the 16 KiB
// allowance is for, six times below the smallest reallocation it guards
// against.
func TestNoAllocs(t *testing.T) {
	const m, k, n = 256, 128, 600
	rng := rand.New(rand.NewPCG(12, 13))
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	fill(rng, a, 1)
	fill(rng, b, 1)
	for _, kn := range kernels {
		kn.f(c, a, b, m, k, n)
		if got := testing.AllocsPerRun(50, func() { kn.f(c, a, b, m, k, n) }); got != 0 {
			t.Errorf("%s: %v allocations per call", kn.name, got)
		}
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		kn.f(c, a, b, m, k, n)
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d >= 16<<10 {
			t.Errorf("%s: %d bytes allocated in the first call after a GC", kn.name, d)
		}
	}
}

// TestEmpty checks the degenerate shapes: k = 0 sets c to zero, m = 0 or
// n = 0 leaves nothing to do.
func TestEmpty(t *testing.T) {
	for _, kn := range kernels {
		for _, pt := range paths {
			c := []float32{1, 2, 3, 4, 5, 6}
			onPath(pt, func() { kn.f(c, nil, nil, 2, 0, 3) })
			if !slices.Equal(c, make([]float32, 6)) {
				t.Errorf("%s/%s: k=0 gives %v, want zeros", kn.name, pt.name, c)
			}
			onPath(pt, func() {
				kn.f(nil, nil, make([]float32, 4*3), 0, 4, 3)
				kn.f(nil, make([]float32, 2*4), nil, 2, 4, 0)
			})
		}
	}
}

// TestOneByOne checks the smallest product exactly.
func TestOneByOne(t *testing.T) {
	for _, kn := range kernels {
		for _, pt := range paths {
			c := []float32{0}
			onPath(pt, func() { kn.f(c, []float32{3}, []float32{-0.5}, 1, 1, 1) })
			if c[0] != -1.5 {
				t.Errorf("%s/%s: 3·(-0.5) = %g", kn.name, pt.name, c[0])
			}
		}
	}
}

// TestShapePanics checks that wrong lengths panic with a message naming the
// kernel and the shapes.
func TestShapePanics(t *testing.T) {
	for _, kn := range kernels {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				want := "kernel.MatMul" + kn.name + ": m=2 k=3 n=4 needs len(a)=6 len(b)=12 len(c)=8, have 6 12 7"
				if msg != want {
					t.Errorf("%s: panic %q, want %q", kn.name, msg, want)
				}
			}()
			kn.f(make([]float32, 7), make([]float32, 6), make([]float32, 12), 2, 3, 4)
		}()
		func() {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, "m=-1") {
					t.Errorf("%s: negative m: panic %q", kn.name, msg)
				}
			}()
			kn.f(nil, nil, nil, -1, 0, 0)
		}()
	}
}

// TestScratchFitsEveryLaterProduct checks that packing space, once
// allocated, fits every later product: after a tiny product, a product with
// k > kc and n > nc (the largest blocks there are) allocates nothing on one
// thread, where the caller gets back the job, and its scratch, of the tiny
// one. Which products a participant takes part in depends on timing when
// threads share the work, so scratch that grew with them would allocate
// now and then in steps long after warm-up. The 16 KiB allowance is the
// runtime's, as in TestNoAllocs.
func TestScratchFitsEveryLaterProduct(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const m, k, n = 200, kc + 100, nc + 70
	rng := rand.New(rand.NewPCG(14, 15))
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	fill(rng, a, 1)
	fill(rng, b, 1)
	for _, kn := range kernels {
		kn.f(c[:4], a[:4], b[:4], 2, 2, 2)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		kn.f(c, a, b, m, k, n)
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d >= 16<<10 {
			t.Errorf("%s: %d bytes allocated by a %dx%dx%d product after a 2x2x2 one", kn.name, d, m, k, n)
		}
	}
}

// TestProductsAreNeverNegativeZero checks on every path the property
// autograd's backward pass relies on when it writes a product straight into
// a gradient that is still zero: every element of a product is a sum started
// from +0, and a round-to-nearest sum of terms is −0 only if it starts at
// −0, so no element is −0, and the product has the bits of 0 + product.
// Inputs are signed zeros, ±1 and ±1/2 (whose products cancel exactly), at
// k = 1 and 2 (where a kernel that started from its first product would
// give −0 for about a quarter of the elements), k above kc (a sum continued
// over two runs) and ragged edges.
func TestProductsAreNeverNegativeZero(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5}
	rng := rand.New(rand.NewPCG(16, 17))
	for _, pt := range paths {
		for _, s := range []benchShape{{20, 1, 20}, {16, 2, 40}, {13, 7, 37}, {2, kc + 3, 5}, {30, 40, 50}} {
			a, b, c := make([]float32, s.m*s.k), make([]float32, s.k*s.n), make([]float32, s.m*s.n)
			for i := range a {
				a[i] = vals[rng.IntN(len(vals))]
			}
			for i := range b {
				b[i] = vals[rng.IntN(len(vals))]
			}
			for _, kn := range kernels {
				onPath(pt, func() { kn.f(c, a, b, s.m, s.k, s.n) })
				for i, v := range c {
					if math.Float32bits(v) == 0x80000000 {
						t.Fatalf("%s %s %v: element %d (row %d, column %d) is -0", pt.name, kn.name, s, i, i/s.n, i%s.n)
					}
				}
			}
		}
	}
}
