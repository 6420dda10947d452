package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAcquire: Acquire writes nothing into the lock file; a held directory
// is refused at once with ErrHeld and the holder's description; after
// Release it can be taken again; a lock file that is not a regular file is
// refused.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, Name)); len(raw) != 0 {
		t.Errorf("Acquire wrote %q into the lock file; only Describe writes", raw)
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

	odd := t.TempDir()
	os.Mkdir(filepath.Join(odd, Name), 0o755)
	if _, err := Acquire(odd); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("Acquire with a directory for the lock file: %v", err)
	}
}
