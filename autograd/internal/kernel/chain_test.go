package kernel

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fma32 returns x·y + z rounded once to float32, as a fused multiply-add
// instruction computes it: the exact value in a big.Float, then one
// rounding to nearest even (which Float32 does, subnormals included).
func fma32(x, y, z float32) float32 {
	var p, s big.Float
	p.SetPrec(600).SetFloat64(float64(x))
	p.Mul(&p, new(big.Float).SetFloat64(float64(y)))
	s.SetPrec(600).Add(&p, new(big.Float).SetFloat64(float64(z)))
	f, _ := s.Float32()
	return f
}

// operand returns A[i,p] and B[p,j] of op o's product from the stored a, b.
func operand(o op, a, b []float32, m, k, n, i, j, p int) (float32, float32) {
	switch o {
	case opNT:
		return a[i*k+p], b[j*k+p]
	case opTN:
		return a[p*m+i], b[p*n+j]
	}
	return a[i*k+p], b[p*n+j]
}

// TestChains checks the bits every path promises, element by element: on
// the SIMD paths c[i,j] is the chain c = fma(A[i,p], B[p,j], c) over
// p = 0, 1, …, k-1 from c = 0, and on the Go path the chain
// c = float32(A[i,p]·B[p,j]) + c. k = 600 spans three runs of kc, and the
// shape leaves partial register blocks in rows and columns on every path,
// so neither the cache blocking nor the edges may change a bit.
func TestChains(t *testing.T) {
	const m, k, n = 29, 2*kc + 88, 53
	rng := rand.New(rand.NewPCG(21, 22))
	for _, kn := range kernels {
		a, b := make([]float32, m*k), make([]float32, k*n)
		fill(rng, a, 1)
		fill(rng, b, 1)
		for _, pt := range paths {
			c := make([]float32, m*n)
			onPath(pt, func() { kn.f(c, a, b, m, k, n) })
			for i := range m {
				for j := range n {
					var want float32
					for p := range k {
						x, y := operand(kn.o, a, b, m, k, n, i, j, p)
						if pt == goPath {
							want = float32(x*y) + want
						} else {
							want = fma32(x, y, want)
						}
					}
					if got := c[i*n+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s/%s: c[%d,%d] = %g (%x), the chain gives %g (%x)",
							kn.name, pt.name, i, j, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

// TestSplits checks that how a product is cut into blocks between
// participants never changes its bits: every path computes each of a set of
// products whole and then block by block for several block shapes (a row,
// odd numbers of rows and columns, blocks that leave partial register blocks
// at every edge), and the results must be identical.
func TestSplits(t *testing.T) {
	const m, k, n = 67, 300, 45
	rng := rand.New(rand.NewPCG(23, 24))
	a, b := make([]float32, m*k), make([]float32, k*n)
	fill(rng, a, 1)
	fill(rng, b, 1)
	for _, kn := range kernels {
		for _, pt := range paths {
			whole := make([]float32, m*n)
			onPath(pt, func() { kn.f(whole, a, b, m, k, n) })
			for _, sp := range [][2]int{{1, n}, {5, 7}, {13, 1}, {37, 33}, {m, 17}, {25, n}} {
				rows, cols := sp[0], sp[1]
				c := make([]float32, m*n)
				j := &job{op: kn.o, path: pt, c: c, a: a, b: b, m: m, k: k, n: n}
				var s scratch
				for i0 := 0; i0 < m; i0 += rows {
					for j0 := 0; j0 < n; j0 += cols {
						j.block(pt, i0, min(i0+rows, m), j0, min(j0+cols, n), &s)
					}
				}
				if d := firstDiff(c, whole); d >= 0 {
					t.Errorf("%s/%s: blocks of %d×%d: c[%d,%d] = %x, whole %x",
						kn.name, pt.name, rows, cols, d/n, d%n, math.Float32bits(c[d]), math.Float32bits(whole[d]))
				}
			}
		}
	}
}
