package kernel

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/viterin/vek/vek32"
)

var perCore = flag.Bool("percore", false, "run TestPerCore, a per-core efficiency comparison with vek")

// TestPerCore compares the kernels with vek32.MatMul_Into on one core, in a
// way that other load on the machine disturbs little: GOMAXPROCS=1, the
// calls of all variants interleaved, and each variant's fastest call in
// process CPU time kept. It logs a markdown table of GFLOP per CPU-second.
// Run it with: go test ./autograd/internal/kernel -run PerCore -percore -v
func TestPerCore(t *testing.T) {
	if !*perCore {
		t.Skip("needs -percore")
	}
	if cpuTime() == 0 {
		t.Skip("requires process CPU time, which cannot be read on this OS")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	t.Log("| m×k×n | vek32.MatMul_Into | NN | NT | TN |")
	t.Log("| --- | --- | --- | --- | --- |")
	for _, s := range benchShapes() {
		rng := rand.New(rand.NewPCG(1, 2))
		x, y := randMat(rng, s.m, s.k), randMat(rng, s.k, s.n)
		c := make([]float32, s.m*s.n)
		fs := []func(){
			func() { vek32.MatMul_Into(c, x, y, s.k) },
			func() { MatMulNN(c, x, y, s.m, s.k, s.n) },
			func() { MatMulNT(c, x, y, s.m, s.k, s.n) },
			func() { MatMulTN(c, x, y, s.m, s.k, s.n) },
		}
		flop := 2 * float64(s.m) * float64(s.k) * float64(s.n)
		best := make([]time.Duration, len(fs))
		for range max(5, int(3e9/flop)) {
			for i, f := range fs {
				t0 := cpuTime()
				f()
				if d := cpuTime() - t0; best[i] == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
		row := fmt.Sprintf("| %d×%d×%d |", s.m, s.k, s.n)
		for _, d := range best {
			row += fmt.Sprintf(" %.1f |", flop/d.Seconds()/1e9)
		}
		t.Log(row)
	}
}
