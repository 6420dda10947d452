package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modref/modref/mod/train"
)

// tinyTrain are the flags of a model and run small enough for tests.
var tinyTrain = []string{"--d", "16", "--heads", "2", "--layers", "2", "--seq", "16", "--batch", "2",
	"--steps", "6", "--warmup", "2", "--eval-every", "3", "--eval-batches", "1"}

// textFile writes a training text of a few kilobytes and returns its path.
func textFile(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "text.txt")
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// hashes returns the SHA-256 of every file under dir.
func hashes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTrainAndSample trains a tiny model from the command line, resumes a
// stopped copy of it, and samples from it.
func TestTrainAndSample(t *testing.T) {
	dir := t.TempDir()
	data := textFile(t, dir)
	run1 := filepath.Join(dir, "run")
	var out, errOut bytes.Buffer
	if code := run(append([]string{"train", "--out", run1, "--data", data}, tinyTrain...), &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d, stderr %q", code, errOut.String())
	}
	for _, name := range []string{"checkpoint/config.json", "checkpoint/params.npz", "checkpoint/optimizer.npz",
		"checkpoint/train.jsonl", "checkpoint/eval.jsonl"} {
		if fi, err := os.Stat(filepath.Join(run1, name)); err != nil || fi.Size() == 0 {
			t.Errorf("run directory: %s is missing or empty (%v)", name, err)
		}
	}
	// The pictures only in a build with -tags pictures (.ci/run tests both).
	for _, name := range []string{"loss-flops.png", "loss-time.svg", "routing.png", "router-weights.svg"} {
		fi, err := os.Stat(filepath.Join(run1, name))
		switch {
		case picturesBuilt && (err != nil || fi.Size() == 0):
			t.Errorf("run directory: %s is missing or empty (%v)", name, err)
		case !picturesBuilt && err == nil:
			t.Errorf("run directory: %s drawn by a build without pictures", name)
		}
	}
	if note := "pictures: not drawn"; strings.Contains(out.String(), note) == picturesBuilt {
		t.Errorf("train printed %q; a build with pictures %v must say %q only when it draws none", out.String(), picturesBuilt, note)
	}
	if !strings.Contains(out.String(), "trained 6 steps") {
		t.Errorf("train printed %q, want a summary of 6 steps", out.String())
	}

	out.Reset()
	errOut.Reset()
	if code := run([]string{"sample", "--checkpoint", run1, "--prompt", "The ", "--tokens", "20", "--compare-dense=false"}, &out, &errOut); code != 0 {
		t.Fatalf("sample: exit %d, stderr %q", code, errOut.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "The ") || len(s) != len("The ")+20+1 {
		t.Errorf("sample printed %q, want the prompt and 20 bytes", s)
	}
	if !strings.Contains(errOut.String(), "layer 0 (dense): 100.0 %") {
		t.Errorf("sample reported %q, want the dense layer at 100 %%", errOut.String())
	}
}

// TestTrainBadInput checks that each bad input exits 2 with one line on
// stderr naming the problem, and changes nothing already on disk.
func TestTrainBadInput(t *testing.T) {
	dir := t.TempDir()
	data := textFile(t, dir)
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	var out, errOut bytes.Buffer
	if code := run(append([]string{"train", "--out", good, "--data", data}, tinyTrain...), &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d, stderr %q", code, errOut.String())
	}
	// A checkpoint that is not one, and one with a truncated params.npz.
	foreign := filepath.Join(dir, "foreign", "checkpoint")
	corrupt := filepath.Join(dir, "corrupt")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "config.json"), []byte(`{"model": "gpt2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(corrupt, os.DirFS(good)); err != nil {
		t.Fatal(err)
	}
	params := filepath.Join(corrupt, "checkpoint", "params.npz")
	if b, err := os.ReadFile(params); err != nil || os.WriteFile(params, b[:len(b)/3], 0o644) != nil {
		t.Fatal("truncating params.npz", err)
	}
	cfgFile := filepath.Join(dir, "config.json")
	raw, err := json.Marshal(train.DefaultConfig())
	if err != nil || os.WriteFile(cfgFile, raw, 0o644) != nil {
		t.Fatal("writing a config", err)
	}
	before := hashes(t, dir)

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing data", []string{"train", "--out", filepath.Join(dir, "new1"), "--data", filepath.Join(dir, "nope.txt")}, "nope.txt"},
		{"empty data", []string{"train", "--out", filepath.Join(dir, "new2"), "--data", empty}, "empty.txt is empty"},
		{"capacity", append([]string{"train", "--out", filepath.Join(dir, "new3"), "--data", data, "--capacity", "2"}, tinyTrain[:4]...), "Ratio = 2"},
		{"heads", []string{"train", "--out", filepath.Join(dir, "new4"), "--data", data, "--d", "16", "--heads", "3"}, "Heads = 3"},
		{"routing", []string{"train", "--out", filepath.Join(dir, "new5"), "--data", data, "--routing", "some"}, `--routing = "some"`},
		{"text too short", []string{"train", "--out", filepath.Join(dir, "new6"), "--data", data, "--seq", "4000", "--batch", "1", "--layers", "2"}, "needs at least 4001 bytes"},
		{"config and model flags", []string{"train", "--out", filepath.Join(dir, "new7"), "--data", data, "--config", cfgFile, "--d", "32"}, "cannot be combined with --config"},
		{"missing config", []string{"train", "--out", filepath.Join(dir, "new8"), "--data", data, "--config", filepath.Join(dir, "nope.json")}, "nope.json"},
		{"foreign config", []string{"train", "--out", filepath.Join(dir, "new9"), "--data", data, "--config", empty}, "--config"},
		{"existing run", append([]string{"train", "--out", good, "--data", data}, tinyTrain...), "already holds a checkpoint"},
		{"resume finished", []string{"train", "--out", good, "--resume", "--data", data}, "nothing to resume"},
		{"resume with flags", []string{"train", "--out", good, "--resume", "--lr", "1"}, "--lr cannot be combined with --resume"},
		{"resume foreign", []string{"train", "--out", filepath.Join(dir, "foreign"), "--resume"}, "not a modref training checkpoint"},
		{"resume corrupt", []string{"train", "--out", corrupt, "--resume", "--data", data}, "params.npz"},
		{"sample foreign", []string{"sample", "--checkpoint", filepath.Join(dir, "foreign")}, "not a modref training checkpoint"},
		{"sample corrupt", []string{"sample", "--checkpoint", corrupt}, "params.npz"},
		{"sample missing", []string{"sample", "--checkpoint", filepath.Join(dir, "nothing")}, "not a checkpoint directory"},
		{"sample empty prompt", []string{"sample", "--checkpoint", good, "--prompt", ""}, "prompt is empty"},
		{"sample causal", []string{"sample", "--checkpoint", good, "--causal", "top-k"}, `--causal = "top-k"`},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(c.args, &out, &errOut); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", c.name, code, errOut.String())
			continue
		}
		msg := errOut.String()
		if !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%s: stderr %q, want one line containing %q", c.name, msg, c.want)
		}
	}
	after := hashes(t, dir)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("files changed by failed commands (-before +after):\n%s", diff)
	}
}
