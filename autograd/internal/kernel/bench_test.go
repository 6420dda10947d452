package kernel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/viterin/vek/vek32"

	"github.com/modref/modref/internal/benchcpu"
)

// randMat returns r·c values uniform in [-1, 1) from a fixed seed.
func randMat(rng *rand.Rand, r, c int) []float32 {
	x := make([]float32, r*c)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	return x
}

type benchShape struct{ m, k, n int }

func (s benchShape) String() string { return fmt.Sprintf("%dx%dx%d", s.m, s.k, s.n) }

func benchShapes() []benchShape {
	var s []benchShape
	for _, d := range []int{64, 128, 256, 512, 1024} {
		s = append(s, benchShape{d, d, d})
	}
	return append(s, benchShape{2048, 512, 512}, benchShape{512, 2048, 512})
}

// benchMatMul times f on one shape and reports GFLOP/s (2·m·k·n flops per
// product) of wall-clock time and, where the process's CPU time can be read,
// per CPU-second: on a machine shared with other work the second is the
// steadier measure of a kernel's efficiency (with two busy threads the ideal
// wall-clock figure is twice it).
func benchMatMul(b *testing.B, s benchShape, f func(c, x, y []float32)) {
	rng := rand.New(rand.NewPCG(1, 2))
	// x and y are sized for every variant: NT reads y as n×k, TN x as k×m.
	x, y := randMat(rng, s.m, s.k), randMat(rng, s.k, s.n)
	c := make([]float32, s.m*s.n)
	f(c, x, y)
	b.ReportAllocs()
	cpu0 := benchcpu.Process()
	for b.Loop() {
		f(c, x, y)
	}
	cpu := benchcpu.Process() - cpu0
	flop := 2 * float64(s.m) * float64(s.k) * float64(s.n) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu > 0 {
		b.ReportMetric(flop/cpu.Seconds()/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkMatMul times the three products on every path this machine can
// run (named path/op/shape; the default path is the first), the SIMD paths
// of Path Portable after them, and vek's kernel beside them. Run it with
// GOMAXPROCS=1 for per-core figures.
func BenchmarkMatMul(b *testing.B) {
	all := append(slices.Clone(paths), portables[:len(portables)-1]...)
	for _, s := range benchShapes() {
		for _, pt := range all {
			for _, kn := range kernels {
				b.Run(pt.name+"/"+kn.name+"/"+s.String(), func(b *testing.B) {
					onPath(pt, func() {
						benchMatMul(b, s, func(c, x, y []float32) { kn.f(c, x, y, s.m, s.k, s.n) })
					})
				})
			}
		}
		b.Run("vek/NN/"+s.String(), func(b *testing.B) {
			benchMatMul(b, s, func(c, x, y []float32) { vek32.MatMul_Into(c, x, y, s.k) })
		})
	}
}
