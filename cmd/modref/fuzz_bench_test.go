package main

import (
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
			oc := r.runCase(g)
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

// BenchmarkFuzzOwnCPU measures modref fuzz's own work per case, without a
// candidate: each case of the default draws (every kind, --max-seq 64,
// seed 1) drawn, generated, written to the scratch directory, its
// candidate's output (the truth, written outside the timing, as a
// candidate would) read back and judged. It reports the median and mean
// process CPU time per case of modref's part (user + system, from
// getrusage; goroutines on both cores count), which is what a user waits
// for beside the candidate (docs/performance.md, "Fuzzing").
func BenchmarkFuzzOwnCPU(b *testing.B) {
	scratch := b.TempDir()
	caseDir, out := fuzzScratch(scratch)
	o := fuzzOptions{seed: 1, space: fuzzcase.Space{MaxSeq: 64}}
	var cpu []float64
	next := 0
	b.ResetTimer()
	for range b.N {
		for attempt := 0; ; attempt++ {
			t0 := processCPU()
			g, err := fuzzcase.Draw(o.seed, next, attempt, o.space)
			if err != nil {
				b.Fatal(err)
			}
			c, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
			if err != nil {
				continue
			}
			if err := writeScratchCase(c, caseDir, filepath.Dir(out)); err != nil {
				b.Fatal(err)
			}
			spent := processCPU() - t0
			b.StopTimer()
			if err := format.WriteNPZ(out, c.Candidate()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t0 = processCPU()
			cand, err := format.ReadCandidate(out, c)
			if err != nil {
				b.Fatal(err)
			}
			r, err := judgeCandidate(c, cand)
			if err != nil || !r.Pass {
				b.Fatalf("case %s (%s): the truth does not pass: %v", g.Name, fuzzcase.Size(g), err)
			}
			cpu = append(cpu, spent+processCPU()-t0)
			next++
			break
		}
	}
	slices.Sort(cpu)
	var sum float64
	for _, v := range cpu {
		sum += v
	}
	b.ReportMetric(1e3*cpu[len(cpu)/2], "median-cpu-ms/case")
	b.ReportMetric(1e3*sum/float64(len(cpu)), "mean-cpu-ms/case")
}

// processCPU is the process's user and system CPU time so far, in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
