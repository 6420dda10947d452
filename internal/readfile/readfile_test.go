package readfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRead: a regular file (or a link to one) within its bound is read
// whole; a directory, FIFO, character device and a file over the bound
// (a sparse one too) are refused at once with the error class and the path.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		if raw, err := Read(p, 5); err != nil || string(raw) != "12345" {
			t.Errorf("Read(%s, 5) = %q, %v; want 12345", p, raw, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 64<<30); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want error
	}{
		{file, ErrTooLarge}, // with a bound of 4 below
		{dir, ErrNotRegular},
		{fifo, ErrNotRegular},
		{"/dev/zero", ErrNotRegular},
		{sparse, ErrTooLarge},
		{filepath.Join(dir, "missing"), os.ErrNotExist},
	} {
		start := time.Now()
		_, err := Read(c.path, 4)
		if !errors.Is(err, c.want) {
			t.Errorf("Read(%s) = %v, want %v", c.path, err, c.want)
			continue
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Read(%s) took %v", c.path, d)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, c.path+": ") && !strings.HasPrefix(msg, "reading "+c.path+": ") {
			t.Errorf("Read(%s): message %q does not start with the path", c.path, msg)
		}
	}
}

// TestKind names each kind of file a message may mention.
func TestKind(t *testing.T) {
	for m, want := range map[os.FileMode]string{
		os.ModeDir: "a directory", os.ModeNamedPipe: "a FIFO", os.ModeSocket: "a socket",
		os.ModeDevice | os.ModeCharDevice: "a character device", os.ModeDevice: "a block device",
		os.ModeSymlink: "a symbolic link", 0o644: "a regular file",
	} {
		if got := Kind(m); got != want {
			t.Errorf("Kind(%v) = %q, want %q", m, got, want)
		}
	}
}
