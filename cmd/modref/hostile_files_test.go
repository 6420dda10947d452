package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/modref/modref/golden"
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
		expectRefused(t, []string{"check", "--dir", dir, "--junit", c.path, "layer-paper"}, []string{"--junit", c.path, c.kind, "only regular files"}, dir, work)
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

	// A directory of gen's own files only is replaced whole; a file the
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
