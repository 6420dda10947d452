// Package dirlock makes a directory the property of one process at a time:
// modref train holds its run directory's lock for as long as it runs, so
// that a second train on the same directory is refused at once, naming the
// holder, instead of failing late or mixing two runs' checkpoints.
//
// On Unix the lock is flock(2) on the directory itself: taking it writes
// nothing, and the kernel releases it when the process ends, however it
// ends (SIGKILL included), so a stale lock never needs clearing by hand.
// The holder describes itself in a file of the directory (Name) once its
// input is accepted; the file stays behind with the last holder's
// description.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/readfile"
)

// Name is the file in a locked directory that describes its holder.
const Name = ".modref.lock"

// maxHolderBytes bounds the holder's description read from Name.
const maxHolderBytes = 4096

// ErrHeld is what Acquire returns, wrapped with the holder's description,
// when another process holds the directory.
var ErrHeld = errors.New("held by another process")

// ErrUnsupported is what Acquire returns on a system without flock(2),
// where a lock that a killed process left behind could not be told from a
// held one.
var ErrUnsupported = errors.New("directory locks need flock(2), which this system lacks")

// Lock is a held directory lock.
type Lock struct {
	dir *os.File
}

// Acquire takes dir's lock for this process, or fails at once with ErrHeld
// naming the process that holds it (as its Describe described it). It
// writes nothing: a command that takes the lock and then refuses its input
// leaves the directory as it was.
func Acquire(dir string) (*Lock, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("locking %s: it is %s, not a directory", dir, readfile.Kind(fi.Mode()))
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, ErrHeld) {
			holder := "another process"
			if raw, rerr := readfile.Read(filepath.Join(dir, Name), maxHolderBytes); rerr == nil && len(raw) > 0 {
				holder = strings.TrimSpace(string(raw))
			}
			return nil, fmt.Errorf("%s is in use by %s: %w", dir, holder, ErrHeld)
		}
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return &Lock{dir: f}, nil
}

// Describe writes the holder's description into the directory's Name file,
// for a second process's message: what (such as "modref train --out
// runs/a"), the process id, the host and the time. The description is a
// courtesy; the lock is the flock.
func (l *Lock) Describe(what string) error {
	host, _ := os.Hostname()
	desc := fmt.Sprintf("%s (pid %d on %s, since %s)\n", what, os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := atomicfile.WriteFile(filepath.Join(l.dir.Name(), Name), []byte(desc)); err != nil {
		return fmt.Errorf("describing the lock's holder: %w", err)
	}
	return nil
}

// Release gives the lock up. The process's end releases it too.
func (l *Lock) Release() error {
	return l.dir.Close()
}
