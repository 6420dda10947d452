// Package dirlock makes a directory the property of one process at a time:
// modref train holds its run directory's lock for as long as it runs, so
// that a second train on the same directory is refused at once, naming the
// holder, instead of failing late or mixing two runs' checkpoints.
//
// On Unix the lock is flock(2) on a file in the directory: the kernel
// releases it when the process ends, however it ends (SIGKILL included),
// so a stale lock never needs clearing by hand. The file stays behind and
// holds the last holder's description.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modref/modref/internal/readfile"
)

// Name is the lock file's name in a locked directory.
const Name = ".modref.lock"

// maxHolderBytes bounds the holder's description read from a lock file.
const maxHolderBytes = 4096

// ErrHeld is what Lock returns, wrapped with the holder's description, when
// another process holds the directory.
var ErrHeld = errors.New("held by another process")

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire takes dir's lock for this process, or fails at once with ErrHeld
// naming the process that holds it (as its Describe described it). It
// creates the lock file if there is none, and changes nothing else: a
// command that takes the lock and then refuses its input leaves the
// directory as it was.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, Name)
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("lock %s is %s, not a regular file; remove it", path, readfile.Kind(fi.Mode()))
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, ErrHeld) {
			holder := "another process"
			if raw, rerr := readfile.Read(path, maxHolderBytes); rerr == nil && len(raw) > 0 {
				holder = strings.TrimSpace(string(raw))
			}
			return nil, fmt.Errorf("%s is in use by %s: %w", dir, holder, ErrHeld)
		}
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return &Lock{f: f}, nil
}

// Describe writes the holder's description into the lock file, for a
// second process's message: what (such as "modref train --out runs/a"),
// the process id, the host and the time. The description is a courtesy;
// the lock is the flock.
func (l *Lock) Describe(what string) error {
	host, _ := os.Hostname()
	desc := fmt.Sprintf("%s (pid %d on %s, since %s)\n", what, os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("describing the lock's holder: %w", err)
	}
	if _, err := l.f.WriteAt([]byte(desc), 0); err != nil {
		return fmt.Errorf("describing the lock's holder: %w", err)
	}
	return nil
}

// Release gives the lock up. The process's end releases it too.
func (l *Lock) Release() error {
	return l.f.Close()
}
