package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
