package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/internal/dirlock"
)

// The gen regression tests of issue 37 ("Lost records", "gen --out
// replacing the directory itself", "Cases no reader loads"), through the
// built binary.

// crashtest is the modref_crashtest build (internal/atomicfile's
// MODREF_CRASH_AT), built once for the tests that kill modref at a step.
var crashtest struct {
	once sync.Once
	bin  string
	err  error
}

// crashtestBin returns the modref_crashtest build, built beside modrefBin.
func crashtestBin(t *testing.T) string {
	t.Helper()
	crashtest.once.Do(func() {
		crashtest.bin = filepath.Join(filepath.Dir(modrefBin), "modref-crashtest")
		if out, err := exec.Command("go", "build", "-tags", "modref_crashtest", "-o", crashtest.bin, ".").CombinedOutput(); err != nil {
			crashtest.err = fmt.Errorf("building with -tags modref_crashtest: %v\n%s", err, out)
		}
	})
	if crashtest.err != nil {
		t.Fatal(crashtest.err)
	}
	return crashtest.bin
}

// killedAt runs the crashtest build bin with args, killed (SIGKILL) when
// it reaches step at (STEP:N), and fails the test unless it was.
func killedAt(t *testing.T, bin, at string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "MODREF_CRASH_AT="+at)
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("modref %v with MODREF_CRASH_AT=%s was not killed (%v)\n%s", args, at, err, out)
	}
}

// printedConfig returns gen --print-config name, decoded and as printed.
func printedConfig(t *testing.T, name string) (map[string]any, string) {
	t.Helper()
	code, out, errOut := runBin(t, "gen", "--print-config", name)
	if code != 0 {
		t.Fatalf("gen --print-config %s: exit %d\n%s", name, code, errOut)
	}
	var g map[string]any
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	return g, out
}

// smallGenConfig writes, in dir, the configuration of a small layer case
// named name (layer-softmax at B = 2, S = 8, d = 8), edited by edit, and
// returns its path.
func smallGenConfig(t *testing.T, dir, name string, edit func(g map[string]any)) string {
	t.Helper()
	g, _ := printedConfig(t, "layer-softmax")
	g["name"] = name
	if edit != nil {
		edit(g)
	}
	raw, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name+".config.json", raw)
}

// genRecordFiles returns the file names dir's gen record lists.
func genRecordFiles(t *testing.T, dir string) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, golden.GenRecord))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Files map[string][]string }
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Files
}

// TestGenLocksItsDirectory: gen --config and gen --out into a directory
// another process holds (internal/dirlock, as train holds its run) are
// refused at once, "in use", nothing written; gens started together into
// one directory either finish with their case in the record, loadable, or
// are refused as "in use", never both exit 0 with a case lost.
func TestGenLocksItsDirectory(t *testing.T) {
	work := t.TempDir()
	dir := filepath.Join(work, "cases")
	os.Mkdir(dir, 0o755)
	cfg := smallGenConfig(t, work, "held", nil)
	l, err := dirlock.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	expectRefused(t, []string{"gen", "--config", cfg, "--out", dir}, []string{dir, "in use"}, dir)
	expectRefused(t, []string{"gen", "--out", dir}, []string{dir, "in use"}, dir)
	l.Release()

	const n = 4
	var wg sync.WaitGroup
	codes := make([]int, n)
	errs := make([]string, n)
	for i := range n {
		cfg := smallGenConfig(t, work, fmt.Sprintf("racer-%d", i), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, errs[i] = runBin(t, "gen", "--config", cfg, "--out", dir)
		}()
	}
	wg.Wait()
	files := genRecordFiles(t, dir)
	for i := range n {
		name := fmt.Sprintf("racer-%d", i)
		switch {
		case codes[i] == 0:
			if files[name+".json"] == nil || files[name+".npz"] == nil {
				t.Errorf("gen of %s exited 0, and the record does not list its files: %v", name, files)
			}
			if code, out, errOut := runBin(t, "check", "--corpus", dir, name); code != 0 {
				t.Errorf("check of %s: exit %d\n%s%s", name, code, out, errOut)
			}
		case codes[i] != 2 || !strings.Contains(errs[i], "in use"):
			t.Errorf("gen of %s: exit %d, stderr %q; want 0, or 2 and \"in use\"", name, codes[i], errs[i])
		}
	}
}

// TestGenRecordNotALink: a .modref-gen that is a link (here to another
// directory's record) is refused by gen --config and gen --out, and
// neither record changes: gen writes its record only as a file of DIR.
func TestGenRecordNotALink(t *testing.T) {
	work := t.TempDir()
	other := filepath.Join(work, "other")
	os.Mkdir(other, 0o755)
	cfg := smallGenConfig(t, work, "theirs", nil)
	if code, _, errOut := runBin(t, "gen", "--config", cfg, "--out", other); code != 0 {
		t.Fatalf("gen --config: exit %d\n%s", code, errOut)
	}
	dir := filepath.Join(work, "mine")
	os.Mkdir(dir, 0o755)
	if err := os.Symlink(filepath.Join(other, golden.GenRecord), filepath.Join(dir, golden.GenRecord)); err != nil {
		t.Fatal(err)
	}
	mine := smallGenConfig(t, work, "mine", nil)
	expectRefused(t, []string{"gen", "--config", mine, "--out", dir}, []string{golden.GenRecord, "a symbolic link", "not a regular file"}, work)
	expectRefused(t, []string{"gen", "--out", dir}, []string{golden.GenRecord, "a symbolic link"}, work)
}

// TestGenLeavesLookalikeTemporaries: a user's file named like a
// temporary that a killed modref left is never removed: gen --out refuses
// the directory naming it, gen --out --keep-others and gen --config leave
// it as it is. What a killed gen did leave (SIGKILL at every step of a gen
// --config's write, from the modref_crashtest build) its record lists, and
// the next gen removes it and writes the case whole.
func TestGenLeavesLookalikeTemporaries(t *testing.T) {
	skipRaceShort(t, "modrefBin and a crash-test build of it generate cases killed at 12 points (61 s at a load of 25-30)")
	work := t.TempDir()
	dir := filepath.Join(work, "corpus")
	os.Mkdir(dir, 0o755)
	if code, errOut := genOut(t, dir); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errOut)
	}
	lookalike := ".layer-paper.npz.modref-tmp-2147483646-abcdef123456"
	writeFile(t, dir, lookalike, []byte("my notes"))
	expectRefused(t, []string{"gen", "--out", dir}, []string{lookalike, "gen did not write"}, dir)
	if code, errOut := genOut(t, dir, "--keep-others"); code != 0 {
		t.Fatalf("gen --keep-others: exit %d\n%s", code, errOut)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, lookalike)); err != nil || string(raw) != "my notes" {
		t.Errorf("gen --keep-others: %s is %q (%v), want the user's file kept", lookalike, raw, err)
	}

	bin := crashtestBin(t)
	cfg := smallGenConfig(t, work, "killed", nil)
	// A gen --config into a directory with a record: the record rewritten
	// (file 1), the case's two files staged (2, 3), renamed (1, 2 of the
	// renames), the record narrowed (4).
	var points []string
	for f := 1; f <= 4; f++ {
		points = append(points, fmt.Sprintf("file-created:%d", f), fmt.Sprintf("file-written:%d", f), fmt.Sprintf("file-renamed:%d", f))
	}
	for _, p := range points {
		cases := filepath.Join(work, "killed-"+strings.ReplaceAll(p, ":", "-"))
		os.Mkdir(cases, 0o755)
		first := smallGenConfig(t, work, "first", nil)
		if code, _, errOut := runBin(t, "gen", "--config", first, "--out", cases); code != 0 {
			t.Fatalf("gen --config: exit %d\n%s", code, errOut)
		}
		user := ".killed.npz.modref-tmp-2147483646-0123456789ab"
		writeFile(t, cases, user, []byte("mine"))
		killedAt(t, bin, p, "gen", "--config", cfg, "--out", cases)
		if code, _, errOut := runBin(t, "gen", "--config", cfg, "--out", cases); code != 0 {
			t.Errorf("%s: gen --config after the kill: exit %d\n%s", p, code, errOut)
			continue
		}
		ents, _ := os.ReadDir(cases)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		want := []string{user, golden.GenRecord, "first.json", "first.npz", "killed.json", "killed.npz"}
		if strings.Join(names, " ") != strings.Join(want, " ") {
			t.Errorf("%s: after the kill and a second gen the directory holds %v, want %v", p, names, want)
		}
		if raw, _ := os.ReadFile(filepath.Join(cases, user)); string(raw) != "mine" {
			t.Errorf("%s: the user's %s changed", p, user)
		}
		if code, out, errOut := runBin(t, "check", "--corpus", cases, "first", "killed"); code != 0 {
			t.Errorf("%s: check: exit %d\n%s%s", p, code, out, errOut)
		}
	}
}

// TestGenOutWritesInside: gen --out writes inside DIR, never replacing it:
// DIR keeps its inode (so a mount point works), its setgid bit and its
// owner, and a DIR whose parent gen may not write (gen run as nobody) is
// written.
func TestGenOutWritesInside(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to give the directory another owner and to run gen as nobody")
	}
	work := t.TempDir()
	dir := filepath.Join(work, "corpus")
	os.Mkdir(dir, 0o755)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o775|os.ModeSetgid)
	before, _ := os.Stat(dir)
	if code, errOut := genOut(t, dir); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errOut)
	}
	after, _ := os.Stat(dir)
	b, a := before.Sys().(*syscall.Stat_t), after.Sys().(*syscall.Stat_t)
	if a.Ino != b.Ino || a.Uid != 65534 || a.Gid != 65534 || after.Mode() != before.Mode() {
		t.Errorf("after gen --out the directory is inode %d, owner %d:%d, mode %v; want %d, 65534:65534, %v (kept)", a.Ino, a.Uid, a.Gid, after.Mode(), b.Ino, before.Mode())
	}
	ents, _ := os.ReadDir(dir)
	if fi, err := ents[1].Info(); err != nil || fi.Sys().(*syscall.Stat_t).Gid != 65534 {
		t.Errorf("%s: group not the directory's (setgid)", ents[1].Name())
	}

	// A parent nobody may not write.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run gen as nobody: %v", err)
	}
	for p := work; p != "/"; p = filepath.Dir(p) {
		if fi, _ := os.Stat(p); fi.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(p, fi.Mode().Perm()|0o005)
			defer os.Chmod(p, fi.Mode().Perm())
		}
	}
	os.Chmod(work, 0o755)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", modrefBin, "gen", "--out", dir)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gen --out as nobody, into its own directory in root's: %v\n%s", err, out)
	}
}

// TestGenPrintConfigAlone: --print-config writes nothing, and is refused
// with --config or --out rather than ignoring them.
func TestGenPrintConfigAlone(t *testing.T) {
	work := t.TempDir()
	cfg := smallGenConfig(t, work, "mine", nil)
	out := filepath.Join(work, "out")
	expectRefused(t, []string{"gen", "--print-config", "layer-paper", "--config", cfg, "--out", out}, []string{"--print-config", "--config"}, work)
	expectRefused(t, []string{"gen", "--print-config", "layer-paper", "--out", out}, []string{"--print-config", "--out"}, work)
}

// TestGenRefusesCasesNoReaderLoads: gen --config refuses, exit 2, nothing
// written, a case no reader would load or whose own self-check would fail:
// a description past 64 KiB (here 10^6 bytes, whose manifest would pass 1 MiB), a jitter or load-balancing weight of 1e300
// (infinite in float32), and a manifest past the reader's 1 MiB (per-row
// routing gaps at B = 40000).
func TestGenRefusesCasesNoReaderLoads(t *testing.T) {
	skipRaceShort(t, "modrefBin generates and refuses cases (47 s at a load of 17-31)")
	work := t.TempDir()
	out := filepath.Join(work, "out")
	os.Mkdir(out, 0o755)
	layer := func(edit func(l map[string]any)) func(g map[string]any) {
		return func(g map[string]any) { edit(g["config"].(map[string]any)["layer"].(map[string]any)) }
	}
	for _, c := range []struct {
		name string
		edit func(g map[string]any)
		want []string
	}{
		{"long-description", func(g map[string]any) { g["description"] = strings.Repeat("long ", 200000) }, []string{"description", "1000000 bytes", "65536"}},
		{"huge-jitter", layer(func(l map[string]any) { l["jitter"] = 1e300 }), []string{"config.layer.jitter = 1e+300", "float32"}},
		{"huge-load-balance", layer(func(l map[string]any) { l["load_balance_weight"] = 1e300 }), []string{"config.layer.load_balance_weight = 1e+300"}},
		{"many-rows", func(g map[string]any) {
			c := g["config"].(map[string]any)
			c["batch"], c["seq_len"] = 40000, 2
			l := c["layer"].(map[string]any)
			l["d_model"], l["heads"], l["d_ff"], l["predictor_hidden"] = 2, 1, 2, 0
		}, []string{"manifest would take", "1048576", "batch 40000", "too large"}},
	} {
		cfg := smallGenConfig(t, work, c.name, c.edit)
		expectRefused(t, []string{"gen", "--config", cfg, "--out", out}, c.want, out)
	}
}

// TestTrainRecoveryAdvice: what train says after a kill (SIGKILL from the
// modref_crashtest build) is right and enough. Killed while describing its
// lock, the run leaves a temporary that no longer blocks a new run; killed
// in its first save before config.json (the last file) was written, it is
// told there is nothing to resume and to remove the leftover (not to
// rename it into place), after which it runs; killed once the save was
// whole but not in place, renaming the leftover as told resumes it. A run
// started while another holds the directory and has begun writing there is
// told the directory is in use, not that it is not new.
func TestTrainRecoveryAdvice(t *testing.T) {
	bin := crashtestBin(t)
	work := t.TempDir()
	data := writeFile(t, work, "text.txt", []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)))
	kill := func(run, at string) {
		t.Helper()
		killedAt(t, bin, at, append([]string{"train", "--out", run, "--data", data}, smallRun...)...)
	}
	leftover := func(run string) string {
		t.Helper()
		ents, _ := os.ReadDir(run)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".checkpoint.modref-tmp-") {
				return filepath.Join(run, e.Name())
			}
		}
		t.Fatalf("%s holds no leftover of a checkpoint save: %v", run, ents)
		return ""
	}

	// The lock's description is the first file written.
	run := filepath.Join(work, "lock-description")
	kill(run, "file-created:1")
	if code, out, errOut := runBin(t, append([]string{"train", "--out", run, "--data", data}, smallRun...)...); code != 0 {
		t.Errorf("train after a kill while describing the lock: exit %d\n%s%s", code, out, errOut)
	}

	// The first save's files are 2 to 6, config.json the last.
	run = filepath.Join(work, "before-config")
	kill(run, "file-created:6")
	left := leftover(run)
	code, _, errOut := runBin(t, append([]string{"train", "--out", run, "--data", data}, smallRun...)...)
	if code != 2 || !strings.Contains(errOut, filepath.Base(left)) || !strings.Contains(errOut, "nothing to resume; remove it") || strings.Contains(errOut, "rename") {
		t.Errorf("train after a first save cut before config.json: exit %d, stderr %q; want 2, the leftover named, and to remove it", code, errOut)
	}
	os.RemoveAll(left)
	if code, out, errOut := runBin(t, append([]string{"train", "--out", run, "--data", data}, smallRun...)...); code != 0 {
		t.Errorf("train once the leftover is removed: exit %d\n%s%s", code, out, errOut)
	}

	run = filepath.Join(work, "whole")
	kill(run, "dir-filled:1")
	left = leftover(run)
	code, _, errOut = runBin(t, append([]string{"train", "--out", run, "--data", data}, smallRun...)...)
	if code != 2 || !strings.Contains(errOut, "rename it to checkpoint and pass --resume") {
		t.Errorf("train after a whole first save not put in place: exit %d, stderr %q; want 2 and to rename it", code, errOut)
	}
	os.Rename(left, filepath.Join(run, "checkpoint"))
	if code, out, errOut := runBin(t, "train", "--out", run, "--data", data, "--resume"); code != 0 || checkpointStep(t, run) != 12 {
		t.Errorf("--resume of the renamed checkpoint: exit %d, step %d\n%s%s", code, checkpointStep(t, run), out, errOut)
	}

	// Another run holds the directory and has begun its first save.
	run = filepath.Join(work, "in-use")
	os.Mkdir(run, 0o755)
	l, err := dirlock.Acquire(run)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	os.Mkdir(filepath.Join(run, fmt.Sprintf(".checkpoint.modref-tmp-%d-0123456789ab", os.Getpid())), 0o755)
	expectRefused(t, append([]string{"train", "--out", run, "--data", data}, smallRun...), []string{run, "in use"}, run)
}

// TestGenRefusesBeforeAllocating: configurations inside every size bound
// of spec whose generation would run out of memory or time are refused by
// gen --config before anything is allocated, exit 2, in a bounded time and
// memory (expectBounded), each naming the bound: B = 2^18 rows of a tiny
// layer (its manifest's routing gaps), vocab 2^20 at B = S = 64 and
// d = 4 (its logits, 4.3·10^9 values), 3.2·10^6 tokens of a tiny layer (the memory of measuring its
// catches), a d = 2 layer at S = 131072, capacity 0.5 (its attention
// scores; one at S = 65536 once took 20 minutes, and since a gathering
// layer's block is counted at its k tokens it is accepted), and a d = 4096
// layer with d_ff = 24000 at S = 2048, B = 1
// (its parameters and gradients within the 2^29 values a case may hold,
// its B×S×d arrays past them: 5.6·10^8 values).
func TestGenRefusesBeforeAllocating(t *testing.T) {
	work := t.TempDir()
	out := filepath.Join(work, "out")
	os.Mkdir(out, 0o755)
	sizes := func(b, s, d, heads, dff int) func(g map[string]any) {
		return func(g map[string]any) {
			c := g["config"].(map[string]any)
			c["batch"], c["seq_len"] = b, s
			l := c["layer"].(map[string]any)
			l["d_model"], l["heads"], l["d_ff"], l["predictor_hidden"] = d, heads, dff, 0
		}
	}
	model := func() string {
		g, _ := printedConfig(t, "model-every-other")
		c := g["config"].(map[string]any)
		c["batch"], c["seq_len"], c["vocab"] = 64, 64, 1<<20
		delete(c, "valid_lengths")
		for _, l := range c["layers"].([]any) {
			l := l.(map[string]any)["layer"].(map[string]any)
			l["d_model"], l["heads"], l["d_ff"], l["predictor_hidden"] = 4, 1, 8, 0
		}
		return writeJSON(t, work, "wide-vocab.json", g)
	}()
	for _, c := range []struct {
		cfg  string
		want []string
	}{
		{smallGenConfig(t, work, "many-rows", sizes(1<<18, 2, 2, 1, 2)), []string{"manifest would take at least", "batch 262144"}},
		{model, []string{"at least", "B×S×vocab"}},
		{smallGenConfig(t, work, "many-tokens", sizes(100000, 32, 2, 1, 2)), []string{"GiB of memory", "16 GiB"}},
		{smallGenConfig(t, work, "long-rows", sizes(1, 131072, 2, 1, 2)), []string{"attention scores counted", "seq_len 131072"}},
		{smallGenConfig(t, work, "d4096-s2048", sizes(1, 2048, 4096, 32, 24000)), []string{"at least 5.6", "536870912"}},
	} {
		expectBounded(t, []string{"gen", "--config", c.cfg, "--out", out}, append(c.want, "too large"), out)
	}
}
