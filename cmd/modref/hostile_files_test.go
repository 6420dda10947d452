package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/internal/dirlock"
)

// The output-path regression tests of issue 22 ("Nothing lost, nothing
// hung"), through the built binary: modref writes only regular files,
// removes only what it wrote, and refuses anything else at once, naming it.

// TestHostileJUnitSpecialFiles: --junit naming a device, a FIFO, a
// directory or a link to a device is refused before the check runs, exit
// 2, and the file is left as it was (as root, renaming over /dev/null
// would have replaced the device by a regular file); --junit "" is a usage
// error.
func TestHostileJUnitSpecialFiles(t *testing.T) {
	dir := absCorpus(t)
	work := t.TempDir()
	fifo := filepath.Join(work, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(work, "empty-dir")
	os.Mkdir(sub, 0o755)
	link := filepath.Join(work, "null-link")
	os.Symlink("/dev/null", link)
	for _, c := range []struct{ path, kind string }{
		{"/dev/null", "a character device"},
		{fifo, "a FIFO"},
		{sub, "a directory"},
		{link, "a character device"},
	} {
		before, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		expectBounded(t, []string{"check", "--dir", dir, "--junit", c.path, "layer-paper"}, []string{"--junit", c.path, c.kind, "only regular files"}, dir, work)
		after, err := os.Lstat(c.path)
		if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
			t.Errorf("--junit %s: the file was replaced (%v, %v)", c.path, after, err)
		}
	}
	code, _, errOut := runBin(t, "check", "--dir", dir, "--junit", "", "layer-paper")
	if code != 2 || !strings.Contains(errOut, "--junit is empty") {
		t.Errorf(`--junit "": exit %d, want 2 and a usage error; stderr %s`, code, errOut)
	}
}

// genOut runs modref gen --out dir with extra flags and returns its exit
// status and stderr.
func genOut(t *testing.T, dir string, flags ...string) (int, string) {
	t.Helper()
	code, _, errOut := runBin(t, append([]string{"gen", "--out", dir}, flags...)...)
	return code, errOut
}

// TestHostileGenKeepsUsersFiles: gen --out removes only what it wrote. A
// directory holding a user's package.json, own .npz files, a candidate
// named like a case, or a subdirectory is refused, nothing changed; with
// --keep-others the cases are written beside the user's files, which stay
// as they were, and the next gen recognises its own files by its record;
// a file the record lists but whose content the user changed is theirs.
func TestHostileGenKeepsUsersFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "package.json", []byte(`{"name": "mine"}`))
	writeFile(t, dir, "mine.npz", []byte("my arrays"))
	os.Mkdir(filepath.Join(dir, "src"), 0o755)
	writeFile(t, filepath.Join(dir, "src"), "layer.py", []byte("import torch"))
	users := tree(t, dir)
	cand := writeFile(t, dir, "layer-paper.npz", []byte("my candidate"))

	// Refused at once, before the cases are generated.
	expectRefused(t, []string{"gen", "--out", dir}, []string{"package.json", "mine.npz", "src", "gen did not write", "--keep-others"}, dir)
	expectRefused(t, []string{"gen", "--out", dir, "--keep-others"}, []string{"layer-paper.npz", "would write over"}, dir)
	os.Remove(cand)

	for run := range 2 {
		if code, errOut := genOut(t, dir, "--keep-others"); code != 0 {
			t.Fatalf("gen --keep-others (run %d): exit %d\n%s", run, code, errOut)
		}
		got := tree(t, dir)
		for p, v := range users {
			if got[p] != v {
				t.Errorf("run %d: %s changed: %q, now %q", run, p, v, got[p])
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "layer-paper.npz")); err != nil {
			t.Errorf("run %d: gen --keep-others wrote no layer-paper.npz: %v", run, err)
		}
	}
	// Without --keep-others the user's files are still refused.
	expectRefused(t, []string{"gen", "--out", dir}, []string{"package.json", "gen did not write"}, dir)

	// A directory of gen's own files only is rewritten whole; a file the
	// record lists (a case an earlier modref wrote) is removed with it.
	own := t.TempDir()
	if code, errOut := genOut(t, own); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errOut)
	}
	recPath := filepath.Join(own, golden.GenRecord)
	raw, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	retired := writeFile(t, own, "layer-retired.json", []byte("{}"))
	sum := sha256.Sum256([]byte("{}"))
	edited := strings.Replace(string(raw), `"files": {`, fmt.Sprintf(`"files": {
    "layer-retired.json": [%q],`, hex.EncodeToString(sum[:])), 1)
	writeFile(t, own, golden.GenRecord, []byte(edited))
	if code, errOut := genOut(t, own); code != 0 {
		t.Fatalf("gen over its own files: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(retired); err == nil {
		t.Error("a file gen's record lists was not removed")
	}
	// The user edits a case file: it is theirs now.
	writeFile(t, own, "layer-paper.json", []byte(`{"edited": true}`))
	expectRefused(t, []string{"gen", "--out", own}, []string{"layer-paper.json", "gen did not write"}, own)
}

// smallRun are the flags of a one-layer run that takes a few milliseconds
// a step, saving every 4 of its 12 steps.
var smallRun = []string{"--d", "8", "--heads", "1", "--layers", "1", "--routing", "all", "--seq", "16", "--batch", "2",
	"--steps", "12", "--warmup", "2", "--eval-every", "1000", "--eval-batches", "1", "--save-every", "4"}

// checkpointStep returns the step of the checkpoint in run/checkpoint, or
// -1 when there is none.
func checkpointStep(t *testing.T, run string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(run, "checkpoint", "config.json"))
	if err != nil {
		return -1
	}
	var ck struct{ Step int }
	if err := json.Unmarshal(raw, &ck); err != nil {
		t.Fatalf("%s/checkpoint/config.json: %v", run, err)
	}
	return ck.Step
}

// TestHostileTrainOthersFiles: a new run refuses an --out directory
// holding another framework's checkpoint directory or file, an earlier
// modref's checkpoint.old, or any file of the user's, at once and with
// nothing changed.
func TestHostileTrainOthersFiles(t *testing.T) {
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	for _, c := range []struct {
		name  string
		setup func(dir string)
		want  string
	}{
		{"foreign checkpoint directory", func(dir string) {
			os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o755)
			writeFile(t, filepath.Join(dir, "checkpoint"), "epoch=3.ckpt", []byte("weights"))
		}, "is not a modref checkpoint"},
		{"foreign checkpoint file", func(dir string) { writeFile(t, dir, "checkpoint", []byte("weights")) }, "is not a modref checkpoint"},
		{"an earlier modref's checkpoint.old", func(dir string) {
			os.MkdirAll(filepath.Join(dir, "checkpoint.old"), 0o755)
			writeFile(t, filepath.Join(dir, "checkpoint.old"), "config.json", []byte("{}"))
		}, "checkpoint.old"},
		{"a user's file", func(dir string) { writeFile(t, dir, "notes.txt", []byte("mine")) }, "notes.txt"},
	} {
		dir := filepath.Join(work, strings.ReplaceAll(c.name, " ", "-"))
		os.Mkdir(dir, 0o755)
		c.setup(dir)
		expectRefused(t, append([]string{"train", "--out", dir, "--data", data}, smallRun...), []string{c.want}, dir)
	}
}

// TestHostileTrainCrashAtEveryStep kills modref train (SIGKILL, from a
// build that can kill itself at a named step) at every step of its first
// and of its second checkpoint save (with -long; without it, at each step
// of the save's directory and of its first file). After each kill the run directory
// holds a complete checkpoint (none only when the first save was cut off),
// a plain re-run refuses the directory and changes nothing, and --resume
// finishes the run from the checkpoint that survived.
func TestHostileTrainCrashAtEveryStep(t *testing.T) {
	bin := crashtestBin(t)
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	type point struct {
		step string
		n    int
	}
	var points []point
	// A save is ReplaceDir: the directory made, five files each created,
	// written and renamed, the directory filled, swapped in, the old one
	// removed. The run's first file written is its lock's description.
	const before = 1
	for save := 1; save <= 2; save++ {
		for _, s := range []string{"dir-made", "dir-filled", "dir-swapped", "dir-done"} {
			points = append(points, point{s, save})
		}
		for f := 1; f <= 5; f++ {
			if f > 1 && !*long {
				// Files 2-5 take the path of file 1; the 38 points
				// take 8 s of CPU, the 14 of first files 4.
				break
			}
			for _, s := range []string{"file-created", "file-written", "file-renamed"} {
				points = append(points, point{s, before + 5*(save-1) + f})
			}
		}
	}
	for _, p := range points {
		run := filepath.Join(work, fmt.Sprintf("%s-%d", p.step, p.n))
		killedAt(t, bin, fmt.Sprintf("%s:%d", p.step, p.n), append([]string{"train", "--out", run, "--data", data}, smallRun...)...)
		step := checkpointStep(t, run)
		firstSave := p.n == 1 || strings.HasPrefix(p.step, "file") && p.n <= before+5
		switch {
		case firstSave && p.step != "dir-swapped" && p.step != "dir-done" && step != -1,
			firstSave && (p.step == "dir-swapped" || p.step == "dir-done") && step != 4,
			!firstSave && p.step != "dir-swapped" && p.step != "dir-done" && step != 4,
			!firstSave && (p.step == "dir-swapped" || p.step == "dir-done") && step != 8:
			t.Errorf("%s:%d: after the kill the checkpoint is at step %d", p.step, p.n, step)
		}
		// A plain re-run deletes nothing.
		expectRefused(t, append([]string{"train", "--out", run, "--data", data}, smallRun...), []string{run}, run)
		if step < 0 {
			continue
		}
		if code, out, errOut := runBin(t, "train", "--out", run, "--data", data, "--resume"); code != 0 {
			t.Errorf("%s:%d: --resume: exit %d\n%s%s", p.step, p.n, code, out, errOut)
		}
		if got := checkpointStep(t, run); got != 12 {
			t.Errorf("%s:%d: after --resume the checkpoint is at step %d, want 12", p.step, p.n, got)
		}
		ents, _ := os.ReadDir(run)
		for _, e := range ents {
			if strings.Contains(e.Name(), "modref-tmp") {
				t.Errorf("%s:%d: after --resume %s is left in the run directory", p.step, p.n, e.Name())
			}
		}
	}
}

// TestHostileTrainSaveFails: a periodic save that fails (here a file size
// limit, which fails the write with EFBIG as a full disk fails it with
// ENOSPC) stops the run at once, exit 2, naming the error and the intact
// checkpoint of the last good save, with no partial checkpoint left; the
// run then resumes from that checkpoint.
func TestHostileTrainSaveFails(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed to limit the file size: %v", err)
	}
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	flags := []string{"--d", "8", "--heads", "1", "--layers", "1", "--routing", "all", "--seq", "16", "--batch", "2",
		"--warmup", "2", "--eval-every", "1000", "--eval-batches", "1"}
	// train.jsonl grows by a line a step while the other files keep their
	// size: measure them at step 100, and limit files to a little more, so
	// that the save at step 100 fits and the one at step 200 does not.
	probe := filepath.Join(work, "probe")
	if code, out, errOut := runBin(t, append([]string{"train", "--out", probe, "--data", data, "--steps", "100"}, flags...)...); code != 0 {
		t.Fatalf("probe run: exit %d\n%s%s", code, out, errOut)
	}
	var largest, jsonl int64
	for _, name := range []string{"config.json", "params.npz", "optimizer.npz", "train.jsonl", "eval.jsonl"} {
		fi, err := os.Stat(filepath.Join(probe, "checkpoint", name))
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, fi.Size())
		if name == "train.jsonl" {
			jsonl = fi.Size()
		}
	}
	limit := largest * 13 / 10
	if 2*jsonl <= limit {
		t.Fatalf("train.jsonl at step 100 is %d bytes, the largest file %d: step 200's would fit under %d", jsonl, largest, limit)
	}
	run := filepath.Join(work, "run")
	cmd := exec.Command(prlimit, append([]string{fmt.Sprintf("--fsize=%d", limit), modrefBin, "train", "--out", run, "--data", data, "--steps", "400", "--save-every", "100"}, flags...)...)
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("a failing save: exit %d (%v), want 2\n%s", cmd.ProcessState.ExitCode(), err, out)
	}
	for _, want := range []string{"file too large", "training stopped at step 200", "checkpoint of step 100", "--resume"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("a failing save: output does not say %q:\n%s", want, out)
		}
	}
	if step := checkpointStep(t, run); step != 100 {
		t.Errorf("after the failed save the checkpoint is at step %d, want 100", step)
	}
	ents, _ := os.ReadDir(run)
	for _, e := range ents {
		if e.Name() != "checkpoint" && e.Name() != dirlock.Name {
			t.Errorf("after the failed save the run directory holds %s", e.Name())
		}
	}
	if code, out, errOut := runBin(t, "train", "--out", run, "--data", data, "--resume"); code != 0 || checkpointStep(t, run) != 400 {
		t.Errorf("--resume after the failed save: exit %d, checkpoint at step %d, want 0 and 400\n%s%s", code, checkpointStep(t, run), out, errOut)
	}
}

// TestHostileTrainLock: a second train on a run directory in use, new or
// resumed, is refused at once, naming the first; the first goes on.
func TestHostileTrainLock(t *testing.T) {
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	for _, c := range []struct {
		name   string
		save   string
		second []string
	}{
		{"a new run", "0", []string{"--data", data, "--steps", "10"}},
		{"a resumed run", "1", []string{"--data", data, "--resume"}},
	} {
		run := filepath.Join(work, strings.ReplaceAll(c.name, " ", "-"))
		first := exec.Command(modrefBin, "train", "--out", run, "--data", data, "--d", "64", "--steps", "100000", "--save-every", c.save, "--quiet")
		first.Dir = work
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		// Ready: the lock names its holder and, when it saves, the first
		// checkpoint is there.
		deadline := time.Now().Add(time.Minute)
		for {
			raw, _ := os.ReadFile(filepath.Join(run, dirlock.Name))
			if strings.Contains(string(raw), "pid ") && (c.save == "0" || checkpointStep(t, run) > 0) {
				break
			}
			if time.Now().After(deadline) {
				first.Process.Kill()
				t.Fatalf("%s: the first run was not ready within a minute", c.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		start := time.Now()
		code, _, errOut := runBin(t, append([]string{"train", "--out", run}, c.second...)...)
		want := fmt.Sprintf("in use by modref train --out %s (pid %d", run, first.Process.Pid)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%s while a run holds the directory: exit %d, stderr %q; want 2 and %q", c.name, code, errOut, want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s was refused after %v, want at once", c.name, d)
		}
		if err := first.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("%s: the first run stopped: %v", c.name, err)
		}
		first.Process.Kill()
		first.Wait()
	}
}

// TestHostileTrainSpecialFiles: everything train and sample read goes
// through internal/readfile: a FIFO or a device as --data or --config, a
// 64 GiB sparse --data, a FIFO in place of a checkpoint's config.json or
// train.jsonl, or a checkpoint whose saved text path is a FIFO is refused
// at once, exit 2, naming the file, under the memory and time limits of
// expectBounded; --data "" is a usage error.
func TestHostileTrainSpecialFiles(t *testing.T) {
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	fifo := filepath.Join(work, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := writeFile(t, t.TempDir(), "sparse.txt", nil) // not hashed by expectRefused
	if err := os.Truncate(sparse, 64<<30); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(work, "good")
	if code, out, errOut := runBin(t, append([]string{"train", "--out", good, "--data", data}, smallRun...)...); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, out, errOut)
	}
	// Checkpoints with a FIFO in place of a file, and one whose config
	// names a FIFO as its text; each is resumed after its 12 steps are
	// raised to 20.
	broken := func(name string, edit func(ck string)) string {
		dir := filepath.Join(work, name)
		if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "checkpoint", "config.json")
		raw, _ := os.ReadFile(cfg)
		os.WriteFile(cfg, []byte(strings.Replace(string(raw), `"Steps": 12`, `"Steps": 20`, 1)), 0o644)
		edit(filepath.Join(dir, "checkpoint"))
		return dir
	}
	fifoConfig := broken("fifo-config", func(ck string) {
		os.Remove(filepath.Join(ck, "config.json"))
		syscall.Mkfifo(filepath.Join(ck, "config.json"), 0o644)
	})
	fifoMetrics := broken("fifo-metrics", func(ck string) {
		os.Remove(filepath.Join(ck, "train.jsonl"))
		syscall.Mkfifo(filepath.Join(ck, "train.jsonl"), 0o644)
	})
	fifoText := broken("fifo-text", func(ck string) {
		p := filepath.Join(ck, "config.json")
		raw, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(raw), fmt.Sprintf("%q", data), fmt.Sprintf("%q", fifo), 1)), 0o644)
	})
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"train", "--out", filepath.Join(work, "a"), "--data", fifo}, []string{fifo, "a FIFO"}},
		{[]string{"train", "--out", filepath.Join(work, "b"), "--data", "/dev/zero"}, []string{"/dev/zero", "a character device"}},
		{[]string{"train", "--out", filepath.Join(work, "c"), "--data", sparse}, []string{sparse, "too large"}},
		{[]string{"train", "--out", filepath.Join(work, "d"), "--data", data, "--config", fifo}, []string{"--config", "a FIFO"}},
		{[]string{"train", "--out", filepath.Join(work, "e"), "--data", data, "--config", "/dev/zero"}, []string{"--config", "a character device"}},
		{[]string{"train", "--out", fifoConfig, "--resume", "--data", data}, []string{"config.json", "a FIFO"}},
		{[]string{"sample", "--checkpoint", fifoConfig}, []string{"config.json", "a FIFO"}},
		{[]string{"train", "--out", fifoMetrics, "--resume", "--data", data}, []string{"train.jsonl", "a FIFO"}},
		{[]string{"train", "--out", fifoText, "--resume"}, []string{fifo, "a FIFO"}},
		{[]string{"train", "--out", filepath.Join(work, "f"), "--data", ""}, []string{"--data is empty"}},
	} {
		start := time.Now()
		expectBounded(t, c.args, c.want, work)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("modref %v took %v to refuse", c.args, d)
		}
	}
}
