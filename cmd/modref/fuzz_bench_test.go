package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/fuzzcase"
	"github.com/modref/modref/internal/candidate"
	"github.com/modref/modref/mod/modcase"
)

// benchmarkFuzzTorch measures modref fuzz's throughput on the PyTorch
// implementation (golden/torch/fuzz_candidate.py, float64) at small shapes
// (--max-seq 16, every kind of case): as a line-protocol server, started
// before the timing, or one process per case. Each case is drawn,
// generated, written, run by the candidate, read back and judged.
func benchmarkFuzzTorch(b *testing.B, perCase bool) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		b.Skip("no PyTorch and NumPy under /usr/bin/python3 (.ci/run installs Debian's):", err)
	}
	script, err := filepath.Abs("../../golden/torch/fuzz_candidate.py")
	if err != nil {
		b.Fatal(err)
	}
	cmd := "/usr/bin/python3 " + script
	var runner candidate.Runner
	if perCase {
		runner = candidate.NewPerCase(cmd+" {manifest} {out}", time.Minute)
	} else {
		runner = candidate.NewServer(cmd, time.Minute, time.Minute)
	}
	defer runner.Close()
	scratch := b.TempDir()
	o := fuzzOptions{seed: 1, space: fuzzcase.Space{MaxSeq: 16}}
	r := &fuzzRun{o: o, runner: runner, scratch: scratch, stderr: os.Stderr}
	next := 0
	one := func() {
		for attempt := 0; ; attempt++ {
			g, err := fuzzcase.Draw(o.seed, next, attempt, o.space)
			if err != nil {
				b.Fatal(err)
			}
			oc := r.runCase(g, math.Inf(1))
			if oc.kind == kindUngenerable {
				continue
			}
			if oc.kind != kindPass {
				b.Fatalf("case %s (%s): %s: %s\n%s", g.Name, fuzzcase.Size(g), oc.kind, oc.reason, oc.reply.Stderr)
			}
			next++
			return
		}
	}
	one() // the server starts (imports torch) before the timing
	b.ResetTimer()
	for range b.N {
		one()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cases/s")
}

func BenchmarkFuzzTorchServer(b *testing.B)  { benchmarkFuzzTorch(b, false) }
func BenchmarkFuzzTorchPerCase(b *testing.B) { benchmarkFuzzTorch(b, true) }

// BenchmarkFuzzOwnCPU measures modref fuzz's own work per case: each case
// of the default draws (every kind, --max-seq 64, seed 1) drawn,
// generated, written to the scratch directory, its candidate's output read
// back and judged, with the run's closest pass kept as the loop keeps it;
// under no profile (the manifests' float32 tolerances) and under
// --precision bf16. The candidate is mod's own float32 implementation
// (modcase.Candidate), a correct one with float32's errors, run in the
// process by ownCandidate, whose CPU time is not counted. It reports the
// median and mean process CPU time per case of modref's part (user +
// system, from getrusage; goroutines on both cores count), which is what a
// user waits for beside the candidate, the median of each kind, and the
// share of cases judged under the float32 tolerances (judgeFuzzCase); with
// -v it logs the median by kind and sequence length (docs/performance.md,
// "Fuzzing").
func BenchmarkFuzzOwnCPU(b *testing.B) {
	for _, precision := range []string{"", "bf16"} {
		name := precision
		if name == "" {
			name = "manifest"
		}
		b.Run(name, func(b *testing.B) { benchmarkFuzzOwnCPU(b, precision) })
	}
}

func benchmarkFuzzOwnCPU(b *testing.B, precision string) {
	o := fuzzOptions{seed: 1, space: fuzzcase.Space{MaxSeq: 64}}
	if precision != "" {
		o.space.Base = map[string]any{"precision": precision}
	}
	own := &ownCandidate{b: b}
	r := &fuzzRun{o: o, runner: own, scratch: b.TempDir(), stderr: os.Stderr}
	type sample struct {
		kind string
		seq  int
		cpu  float64
	}
	var samples []sample
	var closest *closestArray
	widened := 0
	next := 0
	b.ResetTimer()
	for range b.N {
		// A case's CPU counts its draws that could not be generated.
		t0, cand0 := processCPU(), own.cpu
		for attempt := 0; ; attempt++ {
			g, err := fuzzcase.Draw(o.seed, next, attempt, o.space)
			if err != nil {
				b.Fatal(err)
			}
			need := -1.0
			if closest != nil {
				need = closest.Ratio
			}
			own.g = g
			oc := r.runCase(g, need)
			if oc.kind == kindUngenerable {
				continue
			}
			if oc.kind != kindPass {
				b.Fatalf("case %s (%s): %s: %s", g.Name, fuzzcase.Size(g), oc.kind, oc.reason)
			}
			closest = closer(closest, g.Name, oc.result)
			if oc.widened {
				widened++
			}
			samples = append(samples, sample{g.Kind, g.Config.SeqLen, processCPU() - t0 - (own.cpu - cand0)})
			if cpu := samples[len(samples)-1].cpu; cpu > 0.5 {
				b.Logf("%s (%s): %.0f ms, widened %v", g.Name, fuzzcase.Size(g), 1e3*cpu, oc.widened)
			}
			next++
			break
		}
	}
	b.StopTimer()
	median := func(keep func(sample) bool) (float64, int) {
		var v []float64
		for _, s := range samples {
			if keep(s) {
				v = append(v, s.cpu)
			}
		}
		if len(v) == 0 {
			return 0, 0
		}
		slices.Sort(v)
		return v[len(v)/2], len(v)
	}
	all, _ := median(func(sample) bool { return true })
	b.ReportMetric(1e3*all, "median-cpu-ms/case")
	var sum float64
	for _, s := range samples {
		sum += s.cpu
	}
	b.ReportMetric(1e3*sum/float64(len(samples)), "mean-cpu-ms/case")
	b.ReportMetric(float64(widened)/float64(len(samples)), "widened/case")
	for _, kind := range []string{format.KindLayer, format.KindModel, format.KindDecode, format.KindMoDE} {
		if m, cnt := median(func(s sample) bool { return s.kind == kind }); cnt > 0 {
			b.ReportMetric(1e3*m, "median-"+kind+"-ms")
		}
		for _, r := range [][2]int{{1, 8}, {9, 32}, {33, 64}} {
			if m, cnt := median(func(s sample) bool { return s.kind == kind && s.seq >= r[0] && s.seq <= r[1] }); cnt > 0 {
				b.Logf("%s S %d-%d: %d cases, median %.1f ms", kind, r[0], r[1], cnt, 1e3*m)
			}
		}
	}
	if closest != nil {
		b.Logf("closest pass: %s %s at %.3g of its tolerance", closest.Case, closest.Array, closest.Ratio)
	}
}

// ownCandidate is a candidate.Runner that computes case g (generated again
// from its configuration) with mod (modcase.Candidate) in the process and
// writes its arrays where the request asks, counting its CPU time in cpu.
type ownCandidate struct {
	b   *testing.B
	g   *golden.GenConfig
	cpu float64
}

func (o *ownCandidate) Run(req candidate.Request) candidate.Reply {
	t0 := processCPU()
	defer func() { o.cpu += processCPU() - t0 }()
	c, err := golden.GenerateUnmeasured(o.g, nil)
	if err != nil {
		o.b.Fatal(err)
	}
	cand, err := modcase.Candidate(c)
	if err == nil {
		for name, a := range cand {
			if a.DType == "<f4" {
				// float32 values, written as float64 (WriteNPZ's dtypes).
				cand[name] = &format.Array{Shape: a.Shape, F: a.F, DType: "<f8"}
			}
		}
		err = format.WriteNPZ(req.Out, cand)
	}
	if err != nil {
		o.b.Fatal(err)
	}
	return candidate.Reply{Status: candidate.OK}
}

func (o *ownCandidate) Close() error { return nil }

// processCPU is the process's user and system CPU time so far, in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
