package kernel

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// fillSpecial sets x to values uniform in [-1, 1) scaled by a power of two
// drawn from 2⁻⁷⁰ to 2⁷⁰ for about one value in eight, so that products
// underflow into subnormals and overflow to infinity (and sums of opposite
// infinities give NaN), with exact zeros of both signs: the edges where a
// multiply and an add rounded separately differ from a fused multiply-add
// and from each other if an operand or the order changes.
func fillSpecial(rng *rand.Rand, x []float32) {
	for i := range x {
		v := float32(2*rng.Float64() - 1)
		switch rng.IntN(16) {
		case 0:
			v = float32(math.Ldexp(float64(v), rng.IntN(141)-70))
		case 1:
			v = float32(math.Copysign(0, float64(v)))
		}
		x[i] = v
	}
}

// specialOperands returns operands a (m×k values) and b (k×n) filled by
// fillSpecial.
func specialOperands(rng *rand.Rand, m, k, n int) (a, b []float32) {
	a, b = make([]float32, m*k), make([]float32, k*n)
	fillSpecial(rng, a)
	fillSpecial(rng, b)
	return a, b
}

// portableShapes are the shapes TestPortableIsGoLoops compares: rows, steps
// and columns on both sides of every register block's edge on every path
// (mr = 4, 6, 12; widths 1-4, 8, 16, 32), of the main loop's unrolling (4),
// and of the cache blocks (kc = 512 steps, mc = 96 rows, nc = 1024 columns),
// and products large enough to be shared with the worker pool.
var portableShapes = func() [][3]int {
	var s [][3]int
	for _, m := range []int{1, 5, 12, 13, 25, 97} {
		for _, k := range []int{1, 3, 4, 5, 17, kc, kc + 1} {
			for _, n := range []int{1, 7, 16, 17, 32, 33, 47} {
				s = append(s, [3]int{m, k, n})
			}
		}
	}
	return append(s, [3]int{3, 2*kc + 9, 5}, [3]int{7, 40, nc + 45}, [3]int{203, 301, 75}, [3]int{130, 600, 70})
}()

// TestPortableIsGoLoops checks that every path Path Portable can run on
// (the SIMD multiply-and-add kernels this CPU has) gives exactly the bits of
// the Go loops, for the three products over portableShapes, with operands
// that reach subnormals, infinities and NaN, at GOMAXPROCS 1 and 2 (the
// shared products split differently), and that Path Portable itself does.
func TestPortableIsGoLoops(t *testing.T) {
	t.Logf("Path Portable runs on %s here", portable.name)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(41, 42))
	for _, sh := range portableShapes {
		m, k, n := sh[0], sh[1], sh[2]
		a, b := specialOperands(rng, m, k, n)
		for _, kn := range kernels {
			want := make([]float32, m*n)
			run(kn.o, goPath, want, a, b, m, k, n)
			for _, procs := range []int{1, 2} {
				runtime.GOMAXPROCS(procs)
				for _, pt := range portables {
					c := make([]float32, m*n)
					run(kn.o, pt, c, a, b, m, k, n)
					if d := firstDiff(c, want); d >= 0 {
						t.Fatalf("%s/%s, m=%d k=%d n=%d, GOMAXPROCS=%d: c[%d,%d] = %g (%x), the Go loops %g (%x)",
							kn.name, pt.name, m, k, n, procs, d/n, d%n, c[d], math.Float32bits(c[d]), want[d], math.Float32bits(want[d]))
					}
				}
				c := make([]float32, m*n)
				switch kn.o {
				case opNN:
					Portable.MatMulNN(c, a, b, m, k, n)
				case opNT:
					Portable.MatMulNT(c, a, b, m, k, n)
				case opTN:
					Portable.MatMulTN(c, a, b, m, k, n)
				}
				if d := firstDiff(c, want); d >= 0 {
					t.Fatalf("Portable.MatMul%s, m=%d k=%d n=%d, GOMAXPROCS=%d: c[%d,%d] = %x, the Go loops %x",
						kn.name, m, k, n, procs, d/n, d%n, math.Float32bits(c[d]), math.Float32bits(want[d]))
				}
			}
		}
	}
}

// TestPortableChains checks the chain every portable path promises, element
// by element against the scalar loop c = float32(A[i,p]·B[p,j]) + c: k
// spans two runs of kc, and the shape leaves partial register blocks in
// rows and columns on every path.
func TestPortableChains(t *testing.T) {
	const m, k, n = 14, kc + 61, 37
	rng := rand.New(rand.NewPCG(43, 44))
	for _, kn := range kernels {
		a, b := specialOperands(rng, m, k, n)
		for _, pt := range portables {
			c := make([]float32, m*n)
			run(kn.o, pt, c, a, b, m, k, n)
			for i := range m {
				for j := range n {
					var want float32
					for p := range k {
						x, y := operand(kn.o, a, b, m, k, n, i, j, p)
						want = float32(x*y) + want
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
