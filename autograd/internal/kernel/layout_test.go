package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// onLayout runs f with layoutA forced, on the SIMD paths, to read a in
// place (colsA for MatMulTN, rowsA for the others) or to pack it, for every
// product, and restores the default.
func onLayout(inPlace bool, f func()) {
	defer func(old func(*path, op, int, int) aLayout) { layoutA = old }(layoutA)
	layoutA = func(pt *path, o op, m, k int) aLayout {
		switch {
		case pt.cols == nil || !inPlace:
			return packedA
		case o == opTN:
			return colsA
		}
		return rowsA
	}
	f()
}

// layoutName names a forced layout in failure messages.
func layoutName(inPlace bool) string {
	if inPlace {
		return "in place"
	}
	return "packed"
}

// TestLayoutChains checks the chain of fused multiply-adds (TestChains)
// element by element with a read in place (MatMulTN's columns, MatMulNN's
// and MatMulNT's rows) and packed, on every SIMD path, whatever shape
// layoutA would pick them for: k spans two runs of kc, and the shape leaves
// partial register blocks in rows and columns.
func TestLayoutChains(t *testing.T) {
	const m, k, n = 14, kc + 61, 37
	rng := rand.New(rand.NewPCG(31, 32))
	for _, kn := range kernels {
		a, b := make([]float32, m*k), make([]float32, k*n)
		fill(rng, a, 1)
		fill(rng, b, 1)
		for _, pt := range paths[:len(paths)-1] {
			for _, inPlace := range []bool{false, true} {
				c := make([]float32, m*n)
				onLayout(inPlace, func() { onPath(pt, func() { kn.f(c, a, b, m, k, n) }) })
				for i := range m {
					for j := range n {
						var want float32
						for p := range k {
							x, y := operand(kn.o, a, b, m, k, n, i, j, p)
							want = fma32(x, y, want)
						}
						if got := c[i*n+j]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%s/%s, a %s: c[%d,%d] = %g (%x), the chain gives %g (%x)", kn.name, pt.name,
								layoutName(inPlace), i, j, got, math.Float32bits(got), want, math.Float32bits(want))
						}
					}
				}
			}
		}
	}
}

// TestLayoutsAgree checks, on random shapes, that reading a in place and
// packing it give the same bits on every SIMD path, and that both are within
// tol·Σ|ab| of the float64 product and within 2·tol·Σ|ab| of the Go path
// (which always packs). Leading dimensions from 1 to 1100 floats cover the
// distances on both sides of the paths' limits (768 floats), and k past kc two runs of k.
func TestLayoutsAgree(t *testing.T) {
	if len(paths) == 1 {
		t.Skip("only the Go path runs on this CPU")
	}
	for _, kn := range kernels {
		t.Run(kn.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				m := rapid.IntRange(1, 60).Draw(t, "m")
				k := rapid.IntRange(1, kc+100).Draw(t, "k")
				n := rapid.IntRange(1, 80).Draw(t, "n")
				if kn.o == opTN && rapid.Bool().Draw(t, "wideA") {
					m = rapid.IntRange(740, 1100).Draw(t, "m")
					n = rapid.IntRange(1, 20).Draw(t, "n")
					k = rapid.IntRange(1, 200).Draw(t, "k")
				}
				rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 3))
				a, b := make([]float32, m*k), make([]float32, k*n)
				fill(rng, a, 1)
				fill(rng, b, 1)
				c64, mag := ref(kn.o, a, b, m, k, n)
				cg := make([]float32, m*n)
				onPath(goPath, func() { kn.f(cg, a, b, m, k, n) })
				for _, pt := range paths[:len(paths)-1] {
					var packed []float32
					for _, inPlace := range []bool{false, true} {
						c := make([]float32, m*n)
						onLayout(inPlace, func() { onPath(pt, func() { kn.f(c, a, b, m, k, n) }) })
						if w, at := worstError(c, c64, mag); w > tol {
							t.Fatalf("m=%d k=%d n=%d %s, a %s: c[%d,%d] = %g, float64 gives %g: |diff| = %g > tol·Σ|ab| = %g",
								m, k, n, pt.name, layoutName(inPlace), at/n, at%n, c[at], c64[at], math.Abs(float64(c[at])-c64[at]), tol*mag[at])
						}
						for i := range c {
							if d := math.Abs(float64(c[i]) - float64(cg[i])); d > 2*tol*mag[i] {
								t.Fatalf("m=%d k=%d n=%d %s, a %s: c[%d,%d] = %g, go path %g: |diff| = %g > 2·tol·Σ|ab| = %g",
									m, k, n, pt.name, layoutName(inPlace), i/n, i%n, c[i], cg[i], d, 2*tol*mag[i])
							}
						}
						if packed == nil {
							packed = c
						} else if d := firstDiff(c, packed); d >= 0 {
							t.Fatalf("m=%d k=%d n=%d %s: c[%d,%d]: a in place %x, packed %x",
								m, k, n, pt.name, d/n, d%n, math.Float32bits(c[d]), math.Float32bits(packed[d]))
						}
					}
				}
			})
		})
	}
}

// TestLayoutChoice checks which layout each op gets on either side of the
// paths' limits, so that the measured choice cannot change unnoticed.
func TestLayoutChoice(t *testing.T) {
	for _, pt := range paths {
		type choice struct {
			o    op
			m, k int
			want aLayout
		}
		cases := []choice{
			{opNN, 1024, pt.rowsMaxLd, rowsA},
			{opNT, 1024, pt.rowsMaxLd, rowsA},
			{opNN, 64, pt.rowsMaxLd + 1, packedA},
			{opNT, 64, pt.rowsMaxLd + 1, packedA},
			{opTN, min(pt.colsMaxLd, 1<<20), 1024, colsA},
		}
		if pt.colsMaxLd < math.MaxInt { // else no m lies past the limit
			cases = append(cases, choice{opTN, pt.colsMaxLd + 1, 64, packedA})
		}
		for _, tc := range cases {
			want := tc.want
			if pt.cols == nil {
				want = packedA
			}
			if got := layoutA(pt, tc.o, tc.m, tc.k); got != want {
				t.Errorf("%s: op %d m=%d k=%d: layout %d, want %d", pt.name, tc.o, tc.m, tc.k, got, want)
			}
		}
	}
}
