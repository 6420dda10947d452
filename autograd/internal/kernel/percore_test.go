package kernel

import (
	"flag"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/viterin/vek/vek32"

	"github.com/modref/modref/internal/benchcpu"
)

var perCore = flag.Bool("percore", false, "run TestPerCore, a per-core efficiency comparison of the paths with vek")

// TestPerCore compares the kernels on every path with vek32.MatMul_Into on
// one core, in a way that other load on the machine disturbs little:
// GOMAXPROCS=1, the calls of all variants interleaved, and each variant's
// fastest call in process CPU time kept. It logs one line per variant,
// "percore <impl> <op> <m>x<k>x<n> <GFLOP per CPU-second>", which
// bench/matmul_percore.sh puts beside PyTorch's. Run it with:
//
//	go test ./autograd/internal/kernel -run PerCore -percore -v
func TestPerCore(t *testing.T) {
	if !*perCore {
		t.Skip("needs -percore")
	}
	if benchcpu.Process() == 0 {
		t.Skip("requires process CPU time, which cannot be read on this OS")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, d := range []int{256, 512, 1024} {
		s := benchShape{d, d, d}
		rng := rand.New(rand.NewPCG(1, 2))
		x, y := randMat(rng, s.m, s.k), randMat(rng, s.k, s.n)
		c := make([]float32, s.m*s.n)
		type variant struct {
			impl, op string
			f        func()
		}
		vs := []variant{{"vek", "NN", func() { vek32.MatMul_Into(c, x, y, s.k) }}}
		for _, pt := range paths {
			for _, kn := range kernels {
				vs = append(vs, variant{"modref-" + pt.name, kn.name, func() {
					onPath(pt, func() { kn.f(c, x, y, s.m, s.k, s.n) })
				}})
			}
		}
		flop := 2 * float64(s.m) * float64(s.k) * float64(s.n)
		best := make([]time.Duration, len(vs))
		for range max(5, int(3e9/flop)) {
			for i, v := range vs {
				t0 := benchcpu.Process()
				v.f()
				if d := benchcpu.Process() - t0; best[i] == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
		for i, v := range vs {
			t.Logf("percore %s %s %s %.1f", v.impl, v.op, s, flop/best[i].Seconds()/1e9)
		}
	}
}
