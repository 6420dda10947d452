package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAcquire: Acquire writes nothing; a held directory is refused at once
// with ErrHeld and the holder's description; after Release it can be taken
// again; a file is not locked, and a description file that is not a
// regular file is not written.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Acquire wrote into the directory (%v); only Describe writes", ents)
	}
	if err := l.Describe("modref train --out first"); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "modref train --out first (pid ") {
		t.Errorf("second Acquire: %v, want ErrHeld naming the first holder", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l, err = Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l.Describe("third")
	l.Release()
	raw, _ := os.ReadFile(filepath.Join(dir, Name))
	if !strings.HasPrefix(string(raw), "third (pid ") {
		t.Errorf("lock file holds %q, want the last holder", raw)
	}

	if _, err := Acquire(filepath.Join(dir, Name)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Acquire of a file: %v, want a refusal", err)
	}
	odd := t.TempDir()
	os.Mkdir(filepath.Join(odd, Name), 0o755)
	l, err = Acquire(odd)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Describe("x"); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("Describe with a directory for the description: %v", err)
	}
	l.Release()
}
