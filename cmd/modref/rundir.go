package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/dirlock"
	"github.com/modref/modref/mod/train"
)

// checkpointName is the checkpoint's directory in a run directory.
const checkpointName = "checkpoint"

// checkNewRun refuses a run directory that a new run (no --resume) would
// write into and that already holds something: a new run needs a new or
// empty directory, so that it never replaces a file it did not write. It
// writes nothing. The lock file of an earlier run does not count.
func checkNewRun(out string) error {
	fi, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", out, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--out %s is not a directory", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("--out %s: %w", out, err)
	}
	var held []string
	_, err = os.Lstat(filepath.Join(out, checkpointName))
	hasCheckpoint := err == nil
	for _, e := range ents {
		switch name := e.Name(); {
		case name == dirlock.Name:
		case strings.HasPrefix(name, "."+dirlock.Name+".") && atomicfile.IsStale(name):
			// What a kill left of the lock's description: the next
			// description (lock.Describe) replaces it.
		case name == checkpointName && train.CheckCheckpoint(filepath.Join(out, name)) == nil:
			return fmt.Errorf("%s already holds a checkpoint; pass --resume to continue it, or choose another --out", out)
		case name == checkpointName:
			return fmt.Errorf("%s is not a modref checkpoint (it holds no modref config.json), and modref train writes its checkpoint there; choose another --out", filepath.Join(out, name))
		case strings.HasPrefix(name, "."+checkpointName+".") && atomicfile.IsStale(name) && hasCheckpoint:
			// A later save cut off: --resume replaces it (and says so
			// above when the checkpoint is one).
			held = append(held, name)
		case strings.HasPrefix(name, "."+checkpointName+".") && atomicfile.IsStale(name) && train.CheckCheckpoint(filepath.Join(out, name)) == nil:
			return fmt.Errorf("%s holds %s, a whole checkpoint that a save cut off before putting it in place (%s is missing): rename it to %s and pass --resume, or choose another --out", out, name, checkpointName, checkpointName)
		case strings.HasPrefix(name, "."+checkpointName+".") && atomicfile.IsStale(name):
			// config.json is written last: without it the save was cut
			// off before it was whole, and no save had finished before.
			return fmt.Errorf("%s holds %s, the first checkpoint save of a run that was cut off before it was whole (it holds no config.json): there is nothing to resume; remove it and run again, or choose another --out", out, name)
		case name == checkpointName+".old" || name == checkpointName+".new":
			return fmt.Errorf("%s holds %s, left by an interrupted save of an earlier modref; rename it to %s and pass --resume, or choose another --out", out, name, checkpointName)
		default:
			held = append(held, name)
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("--out %s holds %s; a new run writes only into a new or empty directory (or continue a run with --resume)", out, listNames(held))
	}
	return nil
}

// inUse returns, for a run directory that checkNewRun refused with err,
// the error of its lock when another process holds it: a run started at
// the same moment has begun to write there, and "in use" is what the user
// needs to hear, not that the directory is not new. Otherwise err.
func inUse(out string, err error) error {
	if l, lerr := dirlock.Acquire(out); errors.Is(lerr, dirlock.ErrHeld) {
		return fmt.Errorf("--out %w", lerr)
	} else if lerr == nil {
		l.Release()
	}
	return err
}

// lockRun takes the run directory's lock, creating the directory for a new
// run, so that a second train on it is refused at once, naming this one
// once it has described itself (dirlock.Lock.Describe). Under the lock no
// other modref train saves a checkpoint into the directory, so one read
// there is not mixed from two saves.
func lockRun(out string, resume bool) (*dirlock.Lock, error) {
	if !resume {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, fmt.Errorf("--out %s: %w", out, err)
		}
	}
	l, err := dirlock.Acquire(out)
	if err != nil {
		return nil, fmt.Errorf("--out %w", err)
	}
	return l, nil
}

// listNames lists up to five names for a message, then how many more.
func listNames(names []string) string {
	const show = 5
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:show], ", "), len(names)-show)
}
