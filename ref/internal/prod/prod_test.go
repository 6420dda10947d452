package prod

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/modref/modref/internal/fmacheck"
	"pgregory.net/rapid"
)

// TestNoFusableProducts enforces the FMA rule of docs/design.md: every
// floating-point product that is then added is rounded explicitly.
func TestNoFusableProducts(t *testing.T) {
	fmacheck.Require(t, ".")
}

// plain is the loop of the package documentation, element by element.
func plain(m, n, k int, a, b Matrix, c []float64, ldc int, add bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s := 0.0
			if add {
				s = c[i*ldc+j]
			}
			for p := 0; p < k; p++ {
				s += float64(a.at(i, p) * b.at(p, j))
			}
			c[i*ldc+j] = s
		}
	}
}

// special are values whose products and sums exercise signed zeros,
// infinities, NaN, overflow and subnormals.
var special = []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
	math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-300, -1e-300, 1e300, 0.1, 3}

// operand draws an r×c operand (transposed when tr) with extra stride.
func operand(t *rapid.T, name string, r, c int, tr bool, specials bool) Matrix {
	sr, sc := r, c
	if tr {
		sr, sc = c, r
	}
	stride := sc + rapid.IntRange(0, 3).Draw(t, name+"pad")
	data := make([]float64, max(0, (sr-1)*stride+sc))
	seed := rapid.Uint64().Draw(t, name+"seed")
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range data {
		data[i] = rng.NormFloat64()
		if specials && rng.IntN(20) == 0 {
			data[i] = special[rng.IntN(len(special))]
		}
	}
	return Matrix{Data: data, Stride: stride, T: tr}
}

// sameBits reports the first element of got and want whose bits differ
// (any NaN matches any NaN: which payload a NaN sum carries is the
// processor's choice, not the order's).
func sameBits(got, want []float64) error {
	for i := range got {
		g, w := got[i], want[i]
		if math.Float64bits(g) != math.Float64bits(w) && !(math.IsNaN(g) && math.IsNaN(w)) {
			return fmt.Errorf("element %d = %v (bits %#x), plain loop %v (bits %#x)", i, g, math.Float64bits(g), w, math.Float64bits(w))
		}
	}
	return nil
}

// TestMulIsThePlainLoop holds Mul to the plain loop bit for bit on every
// path of this machine (generated AVX-512 and AVX2 code where the CPU has
// it, the Go kernel), on drawn shapes (edges of the register blocks and of
// the k, column and row-task blocks included), transpositions, strides,
// continued chains, special values and GOMAXPROCS 1 to 3.
func TestMulIsThePlainLoop(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func(p *path) { active = p }(active)
	t.Logf("paths: %v", pathNames())
	rapid.Check(t, func(t *rapid.T) {
		active = rapid.SampledFrom(paths).Draw(t, "path")
		dim := func(name string) int {
			return rapid.OneOf(rapid.IntRange(0, 9), rapid.IntRange(30, 70), rapid.SampledFrom([]int{255, 256, 257, 300})).Draw(t, name)
		}
		m, n, k := dim("m"), dim("n"), dim("k")
		specials := rapid.Bool().Draw(t, "specials")
		a := operand(t, "a", m, k, rapid.Bool().Draw(t, "ta"), specials)
		b := operand(t, "b", k, n, rapid.Bool().Draw(t, "tb"), specials)
		ldc := n + rapid.IntRange(0, 2).Draw(t, "ldcpad")
		add := rapid.Bool().Draw(t, "add")
		c0 := operand(t, "c", m, ldc, false, specials).Data
		if m == 0 {
			c0 = nil
		}
		want := append([]float64(nil), c0...)
		plain(m, n, k, a, b, want, ldc, add)
		runtime.GOMAXPROCS(rapid.IntRange(1, 3).Draw(t, "procs"))
		got := append([]float64(nil), c0...)
		Mul(m, n, k, a, b, got, ldc, add)
		if err := sameBits(got, want); err != nil {
			t.Fatalf("%s path, %d×%d×%d (a.T %v, b.T %v, add %v): %v", active.name, m, n, k, a.T, b.T, add, err)
		}
	})
}

// TestMulLargeParallel compares a product large enough to use every
// goroutine and several k and column blocks with the plain loop.
func TestMulLargeParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(1, 2))
	m, n, k := 203, 517, 600
	a := Matrix{Data: make([]float64, m*k), Stride: k}
	b := Matrix{Data: make([]float64, n*k), Stride: k, T: true}
	for i := range a.Data {
		a.Data[i] = rng.NormFloat64()
	}
	for i := range b.Data {
		b.Data[i] = rng.NormFloat64()
	}
	want := make([]float64, m*n)
	plain(m, n, k, a, b, want, n, false)
	defer func(p *path) { active = p }(active)
	for _, pt := range paths {
		active = pt
		for _, procs := range []int{1, 2, 4} {
			runtime.GOMAXPROCS(procs)
			got := make([]float64, m*n)
			Mul(m, n, k, a, b, got, n, false)
			if err := sameBits(got, want); err != nil {
				t.Fatalf("%s path, GOMAXPROCS %d: %v", pt.name, procs, err)
			}
		}
	}
}

// pathNames lists the paths of this machine.
func pathNames() []string {
	var names []string
	for _, p := range paths {
		names = append(names, p.name)
	}
	return names
}

// TestMulPanicsOnShortOperands checks that a shape that does not fit its
// slice is reported.
func TestMulPanicsOnShortOperands(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Mul with a 3×3 a in 8 values did not panic")
		}
	}()
	Mul(3, 3, 3, Matrix{Data: make([]float64, 8), Stride: 3}, Matrix{Data: make([]float64, 9), Stride: 3}, make([]float64, 9), 3, false)
}

func BenchmarkMul(b *testing.B) {
	defer func(p *path) { active = p }(active)
	for _, pt := range paths {
		active = pt
		benchmarkMul(b, pt.name)
	}
}

func benchmarkMul(b *testing.B, name string) {
	for _, sh := range []struct{ m, n, k int }{{512, 512, 512}, {4096, 512, 512}, {4096, 2048, 512}, {4096, 512, 2048}} {
		for _, tb := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s-%dx%dx%d-bT%v", name, sh.m, sh.n, sh.k, tb), func(bb *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				a := Matrix{Data: make([]float64, sh.m*sh.k), Stride: sh.k}
				bm := Matrix{Data: make([]float64, sh.k*sh.n), Stride: sh.n, T: tb}
				if tb {
					bm.Stride = sh.k
				}
				for i := range a.Data {
					a.Data[i] = rng.NormFloat64()
				}
				for i := range bm.Data {
					bm.Data[i] = rng.NormFloat64()
				}
				c := make([]float64, sh.m*sh.n)
				bb.ResetTimer()
				for range bb.N {
					Mul(sh.m, sh.n, sh.k, a, bm, c, sh.n, false)
				}
				bb.ReportMetric(2*float64(sh.m*sh.n*sh.k)*float64(bb.N)/bb.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
