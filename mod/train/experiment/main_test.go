package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/cpu"

	"github.com/modref/modref/internal/race"
	"github.com/modref/modref/mod/train"
)

// raceShort is why -race -short skips the training runs: the race
// detector slows training to minutes (TestShortRun 343 s,
// TestCommittedResultsReproduce 246 s, 592 s for the package at a load of
// 16-26), and the goroutines it would watch, the matrix kernels' pool and
// autograd's parallel attention, are those autograd's own -race tests run.
const raceShort = "training under the race detector takes minutes, and autograd's -race tests watch its goroutines; go test ./mod/train/experiment runs it"

var update = flag.Bool("update", false, "rewrite testdata/short.json from a fresh shortened run")

// long trains TestCommittedResultsReproduce's runs to their end; without
// it, to their first evaluation, so that the README's `go test ./...`
// passes on a 2-core machine within minutes (issue 36). .ci/run sets it.
var long = flag.Bool("long", false, "train TestCommittedResultsReproduce's runs to every evaluation, not the first only (.ci/run sets it)")

// sameBitsAsCommitted skips a test whose expectations hold float32 results
// of the SIMD matrix kernels: the AVX2 and AVX-512 paths give the same bits,
// the Go path (arm64, x86 without AVX2) rounds differently (docs/design.md,
// "Reproducibility and fused multiply-add").
func sameBitsAsCommitted(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skipf("the committed results were computed with the AVX2/AVX-512 matrix kernels; this %s machine runs the Go kernels, whose last bits differ", runtime.GOARCH)
	}
}

// readResults reads a results.json.
func readResults(t *testing.T, path string) Results {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return res
}

// TestCommittedResultsReproduce trains seed 1's three runs of the committed
// docs/results/results.json and requires the same configuration, FLOPs and
// held-out losses at every evaluation, to the last bit: a change to
// training that would change docs/results.md fails here, in about half a
// minute instead of the whole experiment's three seeds and decoding
// timings. Without -long (or with -short) it trains each run only to its
// first evaluation (a tenth of the run).
func TestCommittedResultsReproduce(t *testing.T) {
	race.SkipShort(t, raceShort)
	sameBitsAsCommitted(t)
	res := readResults(t, filepath.Join("..", "..", "..", "docs", "results", "results.json"))
	if len(res.Seeds) == 0 || res.Seeds[0].Seed != 1 {
		t.Fatal("results.json holds no seed 1")
	}
	s1 := res.Seeds[0]
	dense, mcfg, shallow, ratio, shallowRatio, err := configs(s1.DenseSteps)
	if err != nil {
		t.Fatal(err)
	}
	if ratio != res.MoDRatio || shallowRatio != res.ShallowRatio {
		t.Errorf("forward FLOPs ratios %v and %v, results.json has %v and %v", ratio, shallowRatio, res.MoDRatio, res.ShallowRatio)
	}
	mcfg.Seed = res.Config.Seed
	if diff := cmp.Diff(res.Config, mcfg); diff != "" {
		t.Errorf("the MoD run's configuration differs from results.json's (-committed +now):\n%s", diff)
	}
	text, err := train.DefaultText()
	if err != nil {
		t.Fatal(err)
	}
	if text.Info() != res.Text {
		t.Fatalf("the default text is %+v, results.json was made from %+v", text.Info(), res.Text)
	}
	for _, r := range []struct {
		name string
		cfg  train.Config
		want []EvalPoint
	}{{"dense", dense, s1.DenseEvals}, {"MoD", mcfg, s1.MoDEvals}, {"2-layer dense", shallow, s1.ShallowEvals}} {
		if len(r.want) == 0 {
			t.Errorf("%s: results.json has no evaluations", r.name)
			continue
		}
		r.cfg.Seed = 1
		tr, err := train.New(r.cfg, text)
		if err != nil {
			t.Fatal(err)
		}
		evals := len(r.want)
		if testing.Short() || !*long {
			evals = 1
		}
		for len(tr.Metrics().Evals) < evals && !tr.Done() {
			if _, err := tr.Step(); err != nil {
				t.Fatal(err)
			}
		}
		got := evalPoints(tr.Metrics())
		if diff := cmp.Diff(r.want[:evals], got); diff != "" {
			t.Errorf("%s, seed 1: the evaluations differ from results.json's (-committed +now):\n%s", r.name, diff)
		}
	}
}

// TestShortRun runs the whole experiment shortened (one seed, 100 dense
// steps) and compares everything it computes but times and speeds with
// testdata/short.json: the causal evaluation, the predictor's accuracy,
// sampling and the routing while sampling, which the committed results'
// first evaluations do not reach. go test -run TestShortRun -update
// rewrites the expectation after a deliberate change.
func TestShortRun(t *testing.T) {
	race.SkipShort(t, raceShort)
	sameBitsAsCommitted(t)
	out := t.TempDir()
	if err := run([]string{"-out", out, "-seeds", "1", "-steps", "100"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	got := readResults(t, filepath.Join(out, "results.json"))
	for _, name := range []string{"loss-flops.png", "loss-time.png", "routing-topk.png", "routing-causal.png", "router-weights.png"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s is missing or empty (%v)", name, err)
		}
	}
	timeless := func(r Results) Results {
		r.Date, r.GoVersion, r.GOMAXPROCS = "", "", 0
		r.Seeds = append([]Result(nil), r.Seeds...)
		for i := range r.Seeds {
			s := &r.Seeds[i]
			s.DenseStepMs, s.MoDStepMs = 0, 0
			s.DenseTokensPerSec, s.MoDTokensPerSec, s.DenseBestTokensPerSec, s.MoDBestTokensPerSec = 0, 0, 0, 0
		}
		return r
	}
	path := filepath.Join("testdata", "short.json")
	if *update {
		if err := writeJSON(path, timeless(got)); err != nil {
			t.Fatal(err)
		}
	}
	want := readResults(t, path)
	if diff := cmp.Diff(timeless(want), timeless(got)); diff != "" {
		t.Errorf("the shortened run differs from %s (-committed +now); if the change is meant, regenerate docs/results.md (go run ./mod/train/experiment) and this file (-update):\n%s", path, diff)
	}
}
