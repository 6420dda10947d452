package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/spec"
)

// TestConfigBounds checks that every training size beyond its bound, and a
// configuration whose estimated memory exceeds MaxMemoryBytes, is refused
// by Validate with the field, the value and the bound named, and that the
// sizes at their bounds are not refused for their own sake.
func TestConfigBounds(t *testing.T) {
	good := tinyConfig(t, 6)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	wide := func(d, dff, layers int) func(*Config) {
		return func(c *Config) {
			c.Model.Layers = nil
			for range layers {
				b := spec.DefaultBlockConfig(d, 2, dff)
				c.Model.Layers = append(c.Model.Layers, spec.ModelLayer{Config: spec.Config{Block: b}})
			}
		}
	}
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"steps", func(c *Config) { c.Steps = MaxSteps + 1 }, "Steps = 1048577 exceeds the bound 1048576"},
		{"batch", func(c *Config) { c.Batch = 1 << 40 }, "Batch = 1099511627776 exceeds the bound 4096"},
		{"seq", func(c *Config) { c.SeqLen = MaxSeqLen + 1 }, "SeqLen = 65537 exceeds the bound 65536"},
		{"eval batches", func(c *Config) { c.EvalBatches = 1e12 }, "EvalBatches = 1000000000000 exceeds the bound 4096"},
		{"d", wide(1<<40, 4, 1), "D = 1099511627776 exceeds the bound 16384"},
		{"d_ff", wide(32, 1<<40, 1), "DFF = 1099511627776 exceeds the bound 65536"},
		{"layers", wide(32, 128, spec.MaxLayers+1), "layers = 1025 exceeds the bound 1024"},
		{"learned positions", func(c *Config) {
			for l := range c.Model.Layers {
				c.Model.Layers[l].Config.Block.Positions = spec.PositionLearned
			}
			c.Model.MaxLen = 1 << 40
		}, "MaxLen = 1099511627776 exceeds the bound 1048576"},
		// Each size within its bound, together too much memory.
		{"memory: d_ff", wide(1024, spec.MaxDFF, 8), "more than the bound of 4 GiB"},
		{"memory: tokens", func(c *Config) { c.Batch, c.SeqLen = MaxBatch, 4096 }, "Batch = 4096 × SeqLen = 4096"},
		{"memory: long sequences", func(c *Config) { c.Batch, c.SeqLen = 64, MaxSeqLen }, "more than the bound of 4 GiB"},
	} {
		cfg := good
		cfg.Model.Layers = append([]spec.ModelLayer(nil), good.Model.Layers...)
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	at := good
	at.Steps, at.Warmup, at.EvalBatches = MaxSteps, 0, MaxEvalBatches
	if err := at.Validate(); err != nil {
		t.Errorf("Steps and EvalBatches at their bounds: %v", err)
	}
}

// TestEstimatedBytesGrows checks that the estimate grows with every size it
// is made of, so that none of them can grow past memory unseen.
func TestEstimatedBytesGrows(t *testing.T) {
	base := tinyConfig(t, 6)
	est := base.EstimatedBytes()
	grow := map[string]func(*Config){
		"steps": func(c *Config) { c.Steps *= 2 },
		"batch": func(c *Config) { c.Batch *= 2 },
		"seq":   func(c *Config) { c.SeqLen *= 2 },
		"d_ff": func(c *Config) {
			for l := range c.Model.Layers {
				c.Model.Layers[l].Config.Block.DFF *= 2
			}
		},
		"layers": func(c *Config) { c.Model.Layers = append(c.Model.Layers, c.Model.Layers[1]) },
	}
	for name, f := range grow {
		cfg := base
		cfg.Model.Layers = append([]spec.ModelLayer(nil), base.Model.Layers...)
		f(&cfg)
		if got := cfg.EstimatedBytes(); !(got > est) {
			t.Errorf("doubling %s: estimate %v, not above %v", name, got, est)
		}
	}
}

// TestCheckpointNonFinite checks that a NaN or an infinity in a
// checkpoint's parameters or optimiser moments is refused on load, naming
// the file, the array and the index.
func TestCheckpointNonFinite(t *testing.T) {
	text := defaultText(t)
	tr, err := New(tinyConfig(t, 6), text)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := tr.Save(ck); err != nil {
		t.Fatal(err)
	}
	named := tr.Model().Params()
	for i, c := range []struct {
		file  string
		value float64
		want  string
	}{
		{paramsFile, math.NaN(), "array L0.Wq holds NaN at [1 2]"},
		{paramsFile, math.Inf(-1), "array L0.Wq holds -Inf at [1 2]"},
		{optimizerFile, math.Inf(1), "array v.L0.Wq holds +Inf at [1 2]"},
	} {
		var ps []mod.Param
		for _, p := range named {
			data := append([]float32(nil), p.T.Data...)
			if p.Name == "L0.Wq" && c.file == paramsFile {
				data[1*p.T.Cols+2] = float32(c.value)
			}
			if c.file == paramsFile {
				ps = append(ps, mod.Param{Name: p.Name, T: autograd.New(p.T.Rows, p.T.Cols, data)})
				continue
			}
			v := make([]float32, len(data))
			if p.Name == "L0.Wq" {
				v[1*p.T.Cols+2] = float32(c.value)
			}
			ps = append(ps,
				mod.Param{Name: "m." + p.Name, T: autograd.New(p.T.Rows, p.T.Cols, nil)},
				mod.Param{Name: "v." + p.Name, T: autograd.New(p.T.Rows, p.T.Cols, v)})
		}
		raw, err := encodeNPZ(ps)
		if err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(dir, fmt.Sprint("bad", i))
		copyDir(t, ck, bad)
		if err := os.WriteFile(filepath.Join(bad, c.file), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Load(bad, text)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file) {
			t.Errorf("%s with %v: error %v, want one naming the file and containing %q", c.file, c.value, err, c.want)
		}
	}
}

// TestInterruptedEvaluation cancels a run halfway through an evaluation
// (after the first of its batches), at an intermediate evaluation and at
// the last one, saves and resumes it, and expects the evaluation made again
// whole and the metrics of a run that never stopped (wall-clock times
// aside), and Done to be false until the last evaluation is made.
func TestInterruptedEvaluation(t *testing.T) {
	text := defaultText(t)
	cfg := tinyConfig(t, 20)
	cfg.EvalBatches = 3
	_, met, err := Run(context.Background(), cfg, text)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{10, 20} {
		tr, err := New(cfg, text)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var calls []int
		tr.SetEvalProgress(func(done, total int) {
			calls = append(calls, done)
			if total != 3 {
				t.Errorf("evaluation progress total %d, want EvalBatches = 3", total)
			}
			if tr.StepsDone() == at && done == 1 {
				cancel()
			}
		})
		err = tr.Run(ctx, nil)
		if !errors.Is(err, context.Canceled) || tr.StepsDone() != at || tr.Done() {
			t.Fatalf("cancelled in the evaluation after step %d: error %v at step %d, Done %v; want context.Canceled at %d, not done", at, err, tr.StepsDone(), tr.Done(), at)
		}
		if n := len(tr.Metrics().Evals); n != at/10-1 {
			t.Errorf("cancelled in the evaluation after step %d: %d evaluations recorded, want %d", at, n, at/10-1)
		}
		dir := filepath.Join(t.TempDir(), "ck")
		if err := tr.Save(dir); err != nil {
			t.Fatal(err)
		}
		rt, err := Load(dir, text)
		if err != nil {
			t.Fatal(err)
		}
		if rt.Done() {
			t.Errorf("resumed after step %d: Done before the evaluation is made", at)
		}
		if err := rt.Run(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(met, rt.Metrics(), noWall, noEvalWall); diff != "" {
			t.Errorf("stopped in the evaluation after step %d: metrics differ (-uninterrupted +resumed):\n%s", at, diff)
		}
		// Every batch of the evaluations before, then the first of the
		// stopped one and no other.
		if want := slices.Repeat([]int{1, 2, 3}, at/10)[:3*(at/10)-2]; !slices.Equal(calls, want) {
			t.Errorf("evaluation progress calls %v, want %v", calls, want)
		}
	}
}

// TestGenerateBoundsAndInterruption checks that a prompt or a sample beyond
// MaxSampleBytes is refused with the sizes and the bound named, and that a
// sample cancelled after 12 decoding steps returns the bytes made so far,
// a prefix of the uninterrupted sample, with context.Canceled.
func TestGenerateBoundsAndInterruption(t *testing.T) {
	cm, err := CausalModel(mustModel(t), spec.CausalPredictor)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sc   SampleConfig
		want string
	}{
		{SampleConfig{Prompt: make([]byte, MaxSampleBytes+1), Tokens: 0}, "the prompt has 32769 bytes, more than the bound of 32768"},
		{SampleConfig{Prompt: []byte("ab"), Tokens: 1e6}, "Tokens = 1000000 after a prompt of 2 bytes exceeds the bound of 32768"},
		{SampleConfig{Prompt: []byte("ab"), Tokens: MaxSampleBytes - 1}, "Tokens = 32767 after a prompt of 2 bytes"},
	} {
		if _, err := Generate(cm, c.sc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prompt of %d bytes, %d tokens: error %v, want one containing %q", len(c.sc.Prompt), c.sc.Tokens, err, c.want)
		}
	}
	sc := SampleConfig{Prompt: []byte("The "), Tokens: 40, Temperature: 1, Seed: 3}
	whole, err := Generate(cm, sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	last := 0
	part, err := GenerateContext(ctx, cm, sc, func(done, total int) {
		if total != len(sc.Prompt)+sc.Tokens-1 || done != last+1 {
			t.Errorf("progress (%d, %d) after %d, want steps counted one by one out of %d", done, total, last, len(sc.Prompt)+sc.Tokens-1)
		}
		last = done
		if done == 12 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || part == nil {
		t.Fatalf("cancelled sample: %v, want context.Canceled and the sample so far", err)
	}
	if len(part.Text) != 13 || !bytes.HasPrefix(whole.Text, part.Text) || len(part.Routed) != 12 {
		t.Errorf("cancelled after 12 steps: %q with %d routing rows, want the first 13 bytes of %q and 12 rows", part.Text, len(part.Routed), whole.Text)
	}
}

// mustModel is the model of tinyConfig, untrained, with fresh parameters.
func mustModel(t *testing.T) *mod.Model {
	t.Helper()
	m, err := mod.NewModel(tinyConfig(t, 1).Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDecodeConfig checks the --config reader: fields given replace the
// defaults, others keep them, and an unknown field or data after the
// object is an error.
func TestDecodeConfig(t *testing.T) {
	cfg := DefaultConfig()
	if err := DecodeConfig([]byte(`{"Steps": 3, "Warmup": 1}`+"\n"), &cfg); err != nil || cfg.Steps != 3 || cfg.Warmup != 1 || cfg.Batch != DefaultConfig().Batch {
		t.Errorf("Steps and Warmup over the defaults: %v, Steps %d, Warmup %d, Batch %d", err, cfg.Steps, cfg.Warmup, cfg.Batch)
	}
	for _, c := range []struct{ raw, want string }{
		{`{"Steps": 3} {"Steps": 4}`, "data after the JSON object"},
		{`{"Steps": 3} x`, "data after the JSON object"},
		{`{"Stepz": 3}`, `unknown field "Stepz"`},
	} {
		cfg := DefaultConfig()
		if err := DecodeConfig([]byte(c.raw), &cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.raw, err, c.want)
		}
	}
}

// TestMaxConfigBytes checks that a configuration of spec.MaxLayers layers,
// written as Save writes it, fits in MaxConfigBytes, and that the metrics
// files of a checkpoint fit in MetricsBytes.
func TestMaxConfigBytes(t *testing.T) {
	cfg := tinyConfig(t, 6)
	for len(cfg.Model.Layers) < spec.MaxLayers {
		cfg.Model.Layers = append(cfg.Model.Layers, cfg.Model.Layers[0])
	}
	ck := Checkpoint{Format: CheckpointFormat, Version: CheckpointVersion, Config: cfg, RNG: make([]byte, 20)}
	raw, err := json.MarshalIndent(ck, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > MaxConfigBytes {
		t.Errorf("a config.json of %d layers takes %d bytes, more than MaxConfigBytes = %d", spec.MaxLayers, len(raw), MaxConfigBytes)
	}
	t.Logf("config.json of %d layers: %d bytes", spec.MaxLayers, len(raw))
	text := defaultText(t)
	small := tinyConfig(t, 12)
	small.EvalEvery = 1
	tr, err := New(small, text)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := tr.Save(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{trainFile, evalFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > small.MetricsBytes() {
			t.Errorf("%s of %d steps takes %d bytes, more than MetricsBytes = %d", name, small.Steps, fi.Size(), small.MetricsBytes())
		}
	}
}
