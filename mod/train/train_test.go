package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/spec"
)

// tinyConfig is a model small enough for tests: d = 32, 2 heads, 2 layers,
// layer 0 routed at capacity 25 % with the predictor, 4 sequences of 32
// bytes.
func tinyConfig(t testing.TB, steps int) Config {
	t.Helper()
	cfg := DefaultConfig()
	m, err := ModelConfig(32, 2, 2, MoDRouting(0.25), spec.Pattern{Kind: spec.PatternEveryOther})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model, cfg.Steps, cfg.Batch, cfg.SeqLen = m, steps, 4, 32
	cfg.Warmup, cfg.EvalEvery, cfg.EvalBatches = 5, 10, 2
	return cfg
}

// defaultText returns the default text or skips the test when the go
// command cannot be run.
func defaultText(t testing.TB) Text {
	t.Helper()
	text, err := DefaultText()
	if err != nil {
		t.Skipf("the default text needs the go command: %v", err)
	}
	return text
}

// TestLossFalls trains the tiny model for 60 steps and expects the held-out
// loss to end below its first evaluation and well below ln 256 ≈ 5.55, the
// loss of a uniform guess.
func TestLossFalls(t *testing.T) {
	_, met, err := Run(context.Background(), tinyConfig(t, 60), defaultText(t))
	if err != nil {
		t.Fatal(err)
	}
	first, last := met.Evals[0], met.Evals[len(met.Evals)-1]
	t.Logf("held-out loss %.3f after step %d, %.3f after step %d", first.Loss, first.Step, last.Loss, last.Step)
	if last.Step != 60 || len(met.Steps) != 60 || len(met.Evals) != 6 {
		t.Fatalf("%d steps and %d evaluations, the last after step %d; want 60, 6 and 60", len(met.Steps), len(met.Evals), last.Step)
	}
	if !(last.Loss < first.Loss-0.3) || !(last.Loss < 4) {
		t.Errorf("held-out loss %.3f at the end, want below %.3f (the first evaluation's minus 0.3) and below 4", last.Loss, first.Loss-0.3)
	}
	if f := met.Steps[59].Layers[0].Fraction; f != 0.25 {
		t.Errorf("layer 0 routed a fraction %v of the tokens, want the capacity 0.25", f)
	}
}

// TestSchedule checks the learning rate: linear warm-up to LR, then a
// half cosine falling to MinLR at the last step.
func TestSchedule(t *testing.T) {
	c := Config{Steps: 10, Warmup: 4, LR: 1, MinLR: 0.1}
	want := map[int]float64{0: 0.25, 1: 0.5, 3: 1, 4: 1, 9: 0.1}
	for s, w := range want {
		if got := c.lrAt(s); math.Abs(got-w) > 1e-12 {
			t.Errorf("step %d: learning rate %v, want %v", s, got, w)
		}
	}
	for s := 4; s < 9; s++ {
		if !(c.lrAt(s+1) < c.lrAt(s)) {
			t.Errorf("learning rate rises from step %d (%v) to %d (%v) after the warm-up", s, c.lrAt(s), s+1, c.lrAt(s+1))
		}
	}
}

// paramBits returns the bits of every parameter of m.
func paramBits(m *mod.Model) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, p := range m.Params() {
		for _, x := range p.T.Data {
			out[p.Name] = append(out[p.Name], math.Float32bits(x))
		}
	}
	return out
}

// noWall ignores the wall-clock fields, the only ones that differ between
// two runs of the same configuration.
var noWall = cmpopts.IgnoreFields(Step{}, "WallSeconds")
var noEvalWall = cmpopts.IgnoreFields(Eval{}, "WallSeconds")

// TestCheckpointRoundTrip saves a trainer after 7 steps and expects the
// loaded model's parameters, the optimiser's state, the generator and the
// metrics to be those saved, bit for bit.
func TestCheckpointRoundTrip(t *testing.T) {
	text := defaultText(t)
	tr, err := New(tinyConfig(t, 12), text)
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := tr.Save(dir); err != nil {
		t.Fatal(err)
	}
	m, ck, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(paramBits(tr.Model()), paramBits(m)); diff != "" {
		t.Errorf("loaded parameters differ (-saved +loaded):\n%s", diff)
	}
	if diff := cmp.Diff(tr.Config(), ck.Config); diff != "" {
		t.Errorf("loaded config differs (-saved +loaded):\n%s", diff)
	}
	lt, err := Load(dir, text)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tr.opt.State(), lt.opt.State()); diff != "" {
		t.Errorf("loaded optimiser state differs (-saved +loaded):\n%s", diff)
	}
	if a, b := tr.src.Uint64(), lt.src.Uint64(); a != b {
		t.Errorf("the loaded generator draws %d next, the saved one %d", b, a)
	}
	if diff := cmp.Diff(tr.Metrics(), lt.Metrics()); diff != "" {
		t.Errorf("loaded metrics differ (-saved +loaded):\n%s", diff)
	}
	if lt.StepsDone() != 7 || lt.tokens != tr.tokens || lt.flops != tr.flops {
		t.Errorf("loaded counters: step %d, %d tokens, %v FLOPs; want 7, %d, %v", lt.StepsDone(), lt.tokens, lt.flops, tr.tokens, tr.flops)
	}
	// Saving again replaces the checkpoint and leaves no temporary.
	if err := lt.Save(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 1 || ents[0].Name() != "ck" {
		t.Errorf("beside the checkpoint after a save: %v, want only ck", ents)
	}
	// A directory that is not a modref checkpoint (another framework's) is
	// not replaced.
	other := filepath.Join(t.TempDir(), "checkpoint")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "epoch=3.ckpt"), []byte("weights"), 0o644)
	if err := lt.Save(other); err == nil || !strings.Contains(err.Error(), "not a modref checkpoint") {
		t.Errorf("saving over another framework's checkpoint: %v, want a refusal", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 1 || ents[0].Name() != "epoch=3.ckpt" {
		t.Errorf("after the refused save the directory holds %v, want epoch=3.ckpt only", ents)
	}
}

// TestResumeEqualsUninterrupted stops a run after 9 of 20 steps by
// cancelling its context (as Ctrl-C does in modref train), saves, loads and
// finishes it with GOMAXPROCS = 1, and expects the parameters and metrics
// (wall-clock times aside) of a run that never stopped, with the default
// GOMAXPROCS, bit for bit.
func TestResumeEqualsUninterrupted(t *testing.T) {
	text := defaultText(t)
	cfg := tinyConfig(t, 20)
	cfg.Model.Layers[0].Config.Jitter = 0.1 // the generator state matters for jitter too
	whole, met, err := Run(context.Background(), cfg, text)
	if err != nil {
		t.Fatal(err)
	}

	tr, err := New(cfg, text)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = tr.Run(ctx, func(s Step) {
		if s.Step == 9 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || tr.StepsDone() != 9 {
		t.Fatalf("after cancelling at step 9: error %v at step %d, want context.Canceled at 9", err, tr.StepsDone())
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := tr.Save(dir); err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	rt, err := Load(dir, text)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(paramBits(whole), paramBits(rt.Model())); diff != "" {
		t.Errorf("parameters differ (-uninterrupted +resumed):\n%s", diff)
	}
	if diff := cmp.Diff(met, rt.Metrics(), noWall, noEvalWall); diff != "" {
		t.Errorf("metrics differ (-uninterrupted +resumed):\n%s", diff)
	}
}

// fullForwardSample samples like Generate, but computes each step's logits
// with a full forward of the causal model over the whole text so far.
func fullForwardSample(t *testing.T, m *mod.Model, sc SampleConfig) ([]byte, [][]bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(sc.Seed, 0))
	text := append([]byte(nil), sc.Prompt...)
	var routed [][]bool
	var tp autograd.Tape
	for len(text) < len(sc.Prompt)+sc.Tokens {
		n := len(text)
		tokens, targets := make([]int, n), make([]int, n)
		for i, c := range text {
			tokens[i], targets[i] = int(c), autograd.IgnoreIndex
		}
		tp.Reset()
		res, err := m.Forward(&tp, mod.ModelInputs{Tokens: [][]int{tokens}, Targets: [][]int{targets}})
		if err != nil {
			t.Fatal(err)
		}
		routed = routed[:0]
		for i := range n {
			row := make([]bool, len(m.Layers))
			for l, lr := range res.Layers {
				row[l] = lr == nil
				if lr != nil {
					for _, j := range lr.Selected[0] {
						row[l] = row[l] || j == i
					}
				}
			}
			routed = append(routed, row)
		}
		v := res.Logits.Cols
		text = append(text, byte(Pick(res.Logits.Data[(n-1)*v:n*v], sc.Temperature, sc.TopK, rng)))
	}
	return text, routed
}

// TestGenerateEqualsFullForward samples 40 bytes through mod's decoder,
// greedily and at temperature 0.9 with top-k 20, from a model trained for
// 30 steps and routed causally by its predictor and by its router, and
// expects the bytes and routing decisions that full forwards over the text
// so far give.
func TestGenerateEqualsFullForward(t *testing.T) {
	m, _, err := Run(context.Background(), tinyConfig(t, 30), defaultText(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, causal := range []spec.CausalRouting{spec.CausalPredictor, spec.CausalRouter} {
		cm, err := CausalModel(m, causal)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range []SampleConfig{
			{Prompt: []byte("The type of "), Tokens: 40},
			{Prompt: []byte("<p>\n"), Tokens: 40, Temperature: 0.9, TopK: 20, Seed: 3},
		} {
			s, err := Generate(cm, sc)
			if err != nil {
				t.Fatal(err)
			}
			want, wantRouted := fullForwardSample(t, cm, sc)
			if string(s.Text) != string(want) {
				t.Errorf("%s, temperature %v: decoder sampled %q, full forwards %q", causal, sc.Temperature, s.Text, want)
			}
			if diff := cmp.Diff(wantRouted, s.Routed); diff != "" {
				t.Errorf("%s, temperature %v: routing differs (-full forward +decoder):\n%s", causal, sc.Temperature, diff)
			}
			if f := s.Fraction[1]; f != 1 {
				t.Errorf("dense layer 1 processed a fraction %v of the tokens, want 1", f)
			}
		}
	}
}

// TestPick checks the sampling rule: greedy takes the lowest id among the
// largest logits; top-k 1 is greedy; and draws follow the softmax at the
// temperature (4σ bounds over 20000 draws).
func TestPick(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := []float32{1, 3, 3, 0}
	if got := Pick(logits, 0, 0, rng); got != 1 {
		t.Errorf("greedy pick %d, want 1 (the lower of two equal maxima)", got)
	}
	if got := Pick(logits, 5, 1, rng); got != 1 {
		t.Errorf("top-1 pick %d, want 1", got)
	}
	// logits 0 and ln 3 at temperature 1: probabilities 1/4 and 3/4; id 2
	// is outside the top 2.
	l2 := []float32{0, float32(math.Log(3)), -1}
	const n = 20000
	count := 0
	for range n {
		switch Pick(l2, 1, 2, rng) {
		case 1:
			count++
		case 2:
			t.Fatal("picked id 2, which is outside the top 2")
		}
	}
	if p, sd := float64(count)/n, math.Sqrt(0.75*0.25/n); math.Abs(p-0.75) > 4*sd {
		t.Errorf("id 1 drawn with frequency %.4f, want 0.75 ± %.4f", p, 4*sd)
	}
}

// TestBadInputs checks that what cannot work is refused with an error that
// names it, and that a failed load leaves the checkpoint as it was.
func TestBadInputs(t *testing.T) {
	text := defaultText(t)
	good := tinyConfig(t, 6)
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"steps", func(c *Config) { c.Steps = 0 }, "Steps = 0"},
		{"warmup", func(c *Config) { c.Warmup = 9 }, "Warmup = 9"},
		{"vocab", func(c *Config) { c.Model.Vocab = 100 }, "Model.Vocab = 100"},
		{"heads", func(c *Config) { c.Model.Layers[1].Config.Block.Heads = 3 }, "Model"},
		{"capacity", func(c *Config) {
			c.Model.Layers[0].Config.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 40}
		}, "layer 0 at SeqLen = 32"},
		{"lr", func(c *Config) { c.LR = math.NaN() }, "LR = NaN"},
		{"holdout", func(c *Config) { c.HoldOut = 0.9 }, "HoldOut = 0.9"},
	} {
		cfg := good
		cfg.Model.Layers = append([]spec.ModelLayer(nil), good.Model.Layers...)
		c.mutate(&cfg)
		if _, err := New(cfg, text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := New(good, Text{Name: "short.txt", Bytes: []byte("too short")}); err == nil || !strings.Contains(err.Error(), "short.txt has 9 bytes") {
		t.Errorf("short text: error %v, want one naming short.txt and its 9 bytes", err)
	}
	dir := t.TempDir()
	if _, err := ReadText(filepath.Join(dir, "missing.txt")); err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("missing file: error %v, want one naming it", err)
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadText(empty); err == nil || !strings.Contains(err.Error(), "empty.txt is empty") {
		t.Errorf("empty file: error %v, want one saying it is empty", err)
	}

	tr, err := New(good, text)
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ck")
	if err := tr.Save(ck); err != nil {
		t.Fatal(err)
	}
	other := tinyConfig(t, 6)
	other.Model.Layers[0].Routed = false
	otr, err := New(other, text)
	if err != nil {
		t.Fatal(err)
	}
	otherCk := filepath.Join(dir, "other")
	if err := otr.Save(otherCk); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file string
		data       func([]byte) []byte
		want       string
	}{
		{"truncated params", paramsFile, func(b []byte) []byte { return b[:len(b)/2] }, "params.npz"},
		{"foreign config", configFile, func([]byte) []byte { return []byte(`{"name": "something else"}`) }, "not a modref training checkpoint"},
		{"not json", configFile, func([]byte) []byte { return []byte("\x00\x01") }, "not a modref training checkpoint"},
		{"newer version", configFile, func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"Version": 1`, `"Version": 2`, 1))
		}, "version 2"},
		{"another model's params", paramsFile, func([]byte) []byte {
			b, err := os.ReadFile(filepath.Join(otherCk, paramsFile))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, "no array L0.Router"},
		{"float64 params", paramsFile, func([]byte) []byte {
			return float64NPZ(t, tr.Model().Params())
		}, "dtype <f8, want float32"},
		{"truncated optimizer", optimizerFile, func(b []byte) []byte { return b[:100] }, "optimizer.npz"},
	} {
		bad := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		copyDir(t, ck, bad)
		path := filepath.Join(bad, c.file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		corrupt := c.data(b)
		if err := os.WriteFile(path, corrupt, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(bad, text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if after, err := os.ReadFile(path); err != nil || string(after) != string(corrupt) {
			t.Errorf("%s: the file changed after a failed load (%v)", c.name, err)
		}
	}
	if _, err := Load(ck, Text{Name: "other.txt", Bytes: text.Bytes[1:]}); err == nil || !strings.Contains(err.Error(), "other.txt") {
		t.Errorf("another text: error %v, want one naming it", err)
	}
	if _, _, err := LoadModel(filepath.Join(dir, "nothing")); err == nil || !strings.Contains(err.Error(), "not a checkpoint directory") {
		t.Errorf("missing checkpoint: error %v, want one saying so", err)
	}
}

// float64NPZ returns an archive of ps as float64 arrays.
func float64NPZ(t *testing.T, ps []mod.Param) []byte {
	t.Helper()
	arrays := map[string]*format.Array{}
	for _, p := range ps {
		a := &format.Array{Shape: []int{p.T.Rows, p.T.Cols}, DType: "<f8"}
		for _, x := range p.T.Data {
			a.F = append(a.F, float64(x))
		}
		arrays[p.Name] = a
	}
	path := filepath.Join(t.TempDir(), "f8.npz")
	if err := format.WriteNPZ(path, arrays); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyDir copies the files of directory src to a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestVariants trains every kind of routing for a few steps, inspects its
// routing and, where it can route causally, samples from it.
func TestVariants(t *testing.T) {
	text := defaultText(t)
	base := MoDRouting(0.25)
	for _, v := range []struct {
		name    string
		change  func(*spec.Config)
		pattern spec.Pattern
		causal  spec.CausalRouting // "" when the variant cannot sample
	}{
		{"dense", nil, spec.Pattern{Kind: spec.PatternList}, spec.CausalPredictor},
		{"all layers", nil, spec.Pattern{Kind: spec.PatternAll}, spec.CausalPredictor},
		{"router_bce", func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxRouterBCE, 0.01 }, spec.Pattern{Kind: spec.PatternEveryOther}, spec.CausalRouter},
		{"integer capacity, sigmoid", func(c *spec.Config) {
			c.Capacity, c.Weighting = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 5}, spec.WeightSigmoid
		}, spec.Pattern{Kind: spec.PatternEveryOther}, spec.CausalPredictor},
		{"softmax, dense compute", func(c *spec.Config) { c.Weighting, c.Compute = spec.WeightSoftmax, spec.ComputeDense }, spec.Pattern{Kind: spec.PatternAll}, ""},
		{"random router, jitter", func(c *spec.Config) { c.Router, c.Jitter, c.Aux, c.AuxWeight = spec.RouterRandom, 0.1, spec.AuxNone, 0 }, spec.Pattern{Kind: spec.PatternEveryOther}, ""},
		{"l2norm, jitter, load balance", func(c *spec.Config) { c.Router, c.Jitter, c.LoadBalanceWeight = spec.RouterL2Norm, 0.1, 0.01 }, spec.Pattern{Kind: spec.PatternEveryOther}, spec.CausalPredictor},
		{"mlp only", func(c *spec.Config) { c.MLPOnly = true }, spec.Pattern{Kind: spec.PatternEveryOther}, spec.CausalPredictor},
		{"trained causally", func(c *spec.Config) { c.Causal = spec.CausalPredictor }, spec.Pattern{Kind: spec.PatternEveryOther}, spec.CausalPredictor},
	} {
		t.Run(v.name, func(t *testing.T) {
			r := base
			if v.change != nil {
				v.change(&r)
			}
			cfg := tinyConfig(t, 6)
			m, err := ModelConfig(32, 2, 2, r, v.pattern)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Model = m
			model, met, err := Run(context.Background(), cfg, text)
			if err != nil {
				t.Fatal(err)
			}
			if l := met.Evals[len(met.Evals)-1].Loss; !(l < 5.6) {
				t.Errorf("held-out loss %v after 6 steps, want a finite value below ln 256", l)
			}
			ins, err := Inspect(model, text.Bytes[:32])
			if err != nil {
				t.Fatal(err)
			}
			if len(ins.Layers) != 2 || len(ins.Layers[1].Processed) != 32 {
				t.Fatalf("inspect returned %d layers", len(ins.Layers))
			}
			if v.causal == "" {
				if _, err := CausalModel(model, spec.CausalRouter); err == nil {
					t.Error("CausalModel accepted a model that cannot route causally")
				}
				return
			}
			cm, err := CausalModel(model, v.causal)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Generate(cm, SampleConfig{Prompt: []byte("a"), Tokens: 8, Temperature: 1, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Text) != 9 || len(s.Routed) != 8 {
				t.Errorf("sampled %d bytes with %d routing rows, want 9 and 8", len(s.Text), len(s.Routed))
			}
		})
	}
}

// TestStepAllocatesOnlyItsHistory checks that a training step reuses its
// batch buffers and keeps its layer summaries in one growing history:
// after warm-up, 100 steps allocate less than one object per step on
// average (the history's doublings), and every step's Layers still holds,
// after later steps, what the step returned.
func TestStepAllocatesOnlyItsHistory(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := tinyConfig(t, 1<<20)
	cfg.EvalEvery = 0
	tr, err := New(cfg, defaultText(t))
	if err != nil {
		t.Fatal(err)
	}
	var returned [][]Layer
	step := func() {
		s, err := tr.Step()
		if err != nil {
			t.Fatal(err)
		}
		returned = append(returned, append([]Layer(nil), s.Layers...))
	}
	step()
	before := len(returned)
	if a := testing.AllocsPerRun(100, func() {
		if _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("a training step allocates %v objects on average after warm-up, want less than 1", a)
	}
	for range 20 {
		step()
	}
	steps := tr.Metrics().Steps
	for i, want := range returned {
		k := i
		if i >= before {
			k = i + 101 // the AllocsPerRun steps (its warm-up run included) lie between
		}
		if diff := cmp.Diff(want, steps[k].Layers); diff != "" {
			t.Fatalf("step %d's layers changed after later steps (-returned +history):\n%s", steps[k].Step, diff)
		}
	}
}

// TestSaveRefusesNonFinite: a trainer whose parameters diverged to a NaN is
// not saved (Load would refuse the checkpoint), and the checkpoint already
// saved stays as it was.
func TestSaveRefusesNonFinite(t *testing.T) {
	tr, err := New(tinyConfig(t, 8), defaultText(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := tr.Save(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "params.npz"))
	p := tr.Model().Params()[1]
	p.T.Data[3] = float32(math.NaN())
	err = tr.Save(dir)
	if want := fmt.Sprintf("array %s holds NaN at [0 3]", p.Name); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("saving a NaN parameter: %v, want an error saying %q", err, want)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "params.npz")); !bytes.Equal(before, after) {
		t.Error("the refused save changed the checkpoint")
	}
}
