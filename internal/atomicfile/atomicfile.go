// Package atomicfile writes files and directories so that a reader sees
// either the old contents or the new, never a mixture or a half-written
// file: everything is written under a temporary name beside its target and
// renamed into place. Only regular files are written over (a device, FIFO
// or directory at the path is refused and left as it is), and what is
// replaced keeps its mode; a new file is 0644 less the umask. Temporary
// files and directories are removed on every error, on
// SIGINT, SIGTERM and SIGHUP (see HandleSignals), and, when a SIGKILL left
// one behind, by the next write to the same target.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/modref/modref/internal/readfile"
)

// tmpTag marks the temporary names this package makes:
// .<base>.modref-tmp-<pid>-<random>.
const tmpTag = ".modref-tmp-"

// pending holds the temporary paths in use, for the signal handler.
var pending sync.Map

// commit is held while a temporary is renamed or exchanged into place, and
// taken for good by the signal handler before it removes the temporaries:
// so a signal either comes before the rename, which then never happens,
// or after it, and never removes part of a temporary directory that is
// then swapped in.
var commit sync.Mutex

// tempName returns a fresh temporary name beside path, after removing the
// ones a killed process left for the same path.
func tempName(path string) string {
	dir, base := filepath.Split(path)
	removeStale(dir, base)
	return NewTempName(path)
}

// removeStale removes temporary names for base in dir whose process no
// longer runs.
func removeStale(dir, base string) {
	if dir == "" {
		dir = "."
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "."+base+tmpTag+"*"))
	for _, m := range matches {
		if IsStale(filepath.Base(m)) {
			os.RemoveAll(m)
		}
	}
}

// IsStale reports whether name (a base name) is a temporary file or
// directory that this package made in a process that no longer runs (a
// SIGKILL left it): the next write to its target removes it.
func IsStale(name string) bool {
	_, rest, ok := strings.Cut(name, tmpTag)
	if !ok || !strings.HasPrefix(name, ".") {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	return ok && err == nil && pid != os.Getpid() && !alive(pid)
}

// alive reports whether a process with this id runs.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, os.ErrPermission)
}

// ErrNotRegular is what WriteFile and Check say of a path that exists and
// is not a regular file (a device, FIFO, socket or directory), or is a
// symbolic link to nothing: modref writes only regular files.
var ErrNotRegular = errors.New("not a regular file")

// target returns the file WriteFile replaces for path, and the mode the new
// file gets: path itself, new (0644 less the umask) or regular (its own
// mode), or, for a symbolic link, the regular or new file it leads to, so
// that the link stays a link.
func target(path string) (string, os.FileMode, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			return "", 0, fmt.Errorf("writing %s: its directory: %w", path, err)
		}
		return path, 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("writing %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", 0, fmt.Errorf("%s is a symbolic link that leads to no file (%w), %w; modref writes only regular files", path, err, ErrNotRegular)
		}
		if fi, err = os.Stat(real); err != nil {
			return "", 0, fmt.Errorf("writing %s: %w", path, err)
		}
		if !fi.Mode().IsRegular() {
			return "", 0, fmt.Errorf("%s is a link to %s, which is %s, %w; modref writes only regular files and leaves it as it is", path, real, readfile.Kind(fi.Mode()), ErrNotRegular)
		}
		return real, fi.Mode().Perm(), nil
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is %s, %w; modref writes only regular files and leaves it as it is", path, readfile.Kind(fi.Mode()), ErrNotRegular)
	}
	return path, fi.Mode().Perm(), nil
}

// Check returns the error WriteFile would give for path before a byte is
// written: nil when path is a regular file, a link to one, or a new name in
// an existing directory. Commands check their output paths with it before
// they start long work.
func Check(path string) error {
	_, _, err := target(path)
	return err
}

// WriteFile writes data to path: to a new temporary file beside it, synced,
// then renamed over path. A path that exists must be a regular file (or a
// link to one, which is written through, the link kept); the new file has
// the mode of the file it replaces, or 0644 less the umask. Anything else
// (a device such as /dev/null, a FIFO, a directory) is refused with
// ErrNotRegular and left as it is. On any error path is unchanged and the
// temporary file is gone.
func WriteFile(path string, data []byte) error {
	real, mode, err := target(path)
	if err != nil {
		return err
	}
	s, err := stage(path, real, mode, tempName(real), data)
	if err != nil {
		return err
	}
	return s.Commit()
}

// Staged is data written and synced under a temporary name in the
// directory of its target, not yet in place: Commit renames it over the
// target, Abort removes it. Until then the signal handler of HandleSignals
// removes it.
type Staged struct {
	path, real, tmp string
}

// NewTempName returns a fresh temporary name for path, in its directory,
// and removes nothing: a caller that stages through it (Stage) and records
// the name before can tell its own leftovers from a user's file of a
// similar name, which WriteFile's removal of stale temporaries cannot.
func NewTempName(path string) string {
	dir, base := filepath.Split(path)
	var r [6]byte
	rand.Read(r[:])
	return filepath.Join(dir, "."+base+tmpTag+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(r[:]))
}

// Stage writes data to tmp (created, so it must not exist), synced, for
// Commit to rename over path. path must be a regular file or new, not a
// link: the new file gets its mode, or 0644 less the umask. On any error
// nothing is left at tmp.
func Stage(path, tmp string, data []byte) (*Staged, error) {
	fi, err := os.Lstat(path)
	var mode os.FileMode
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("writing %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is %s, %w; modref writes only regular files and leaves it as it is", path, readfile.Kind(fi.Mode()), ErrNotRegular)
	default:
		mode = fi.Mode().Perm()
	}
	return stage(path, path, mode, tmp, data)
}

// stage writes data to tmp with mode (0: the default) for a Staged that
// renames it over real, the file path names.
func stage(path, real string, mode os.FileMode, tmp string, data []byte) (*Staged, error) {
	// Created under commit, so that once the signal handler holds it no
	// temporary is created that it would not remove.
	commit.Lock()
	pending.Store(tmp, true)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	commit.Unlock()
	if err != nil {
		pending.Delete(tmp)
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	reached("file-created")
	if mode != 0 {
		err = f.Chmod(mode)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	s := &Staged{path: path, real: real, tmp: tmp}
	if err != nil {
		s.Abort()
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	reached("file-written")
	return s, nil
}

// Commit renames the staged data over its target. On an error the
// temporary file is removed and the target is unchanged.
func (s *Staged) Commit() error {
	commit.Lock()
	err := os.Rename(s.tmp, s.real)
	commit.Unlock()
	if err != nil {
		s.Abort()
		return fmt.Errorf("writing %s: %w", s.path, err)
	}
	pending.Delete(s.tmp)
	reached("file-renamed")
	return nil
}

// Abort removes the staged data; the target is unchanged.
func (s *Staged) Abort() {
	os.Remove(s.tmp)
	pending.Delete(s.tmp)
}

// ReplaceDir replaces the directory dir by a new one with the same mode,
// holding exactly what fill writes into the temporary directory it is
// given (created beside dir), or, when dir does not exist, creates it so
// (mode 0755 less the umask). On Linux an existing dir and the new one are
// exchanged in one atomic rename, so that dir is at every instant the old
// directory or the new one; elsewhere, and on Linux file systems without
// the exchange (NFS), dir is missing for the moment between two renames. On any error dir is unchanged and the temporary directory
// is gone.
func ReplaceDir(dir string, fill func(tmp string) error) error {
	// The directory itself is replaced, not a link to it, and "." has a
	// parent to hold the temporary directory.
	fi, err := os.Stat(dir)
	exists := err == nil
	real := dir
	switch {
	case exists && !fi.IsDir():
		return fmt.Errorf("replacing %s: %s, not a directory", dir, readfile.Kind(fi.Mode()))
	case exists:
		real, err = filepath.EvalSymlinks(dir)
	case errors.Is(err, fs.ErrNotExist):
		err = nil
	}
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("replacing %s: %w", dir, err)
	}
	dir = real
	tmp := tempName(dir)
	pending.Store(tmp, true)
	defer pending.Delete(tmp)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("replacing %s: %w", dir, err)
	}
	if exists {
		if err := os.Chmod(tmp, fi.Mode().Perm()); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("replacing %s: %w", dir, err)
		}
	}
	reached("dir-made")
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	reached("dir-filled")
	commit.Lock()
	if exists {
		err = exchange(tmp, dir)
	} else {
		err = os.Rename(tmp, dir)
	}
	commit.Unlock()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("replacing %s: %w", dir, err)
	}
	reached("dir-swapped")
	// tmp now holds the old contents, or nothing.
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing the old contents of %s (now %s): %w", dir, tmp, err)
	}
	reached("dir-done")
	return nil
}

// exchangeByRenames swaps the directories a and b with two renames through
// a third name: b is missing between them.
func exchangeByRenames(a, b string) error {
	mid := a + ".old"
	if err := os.Rename(b, mid); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		os.Rename(mid, b)
		return err
	}
	return os.Rename(mid, a)
}

// crashPoint, when set, is called at each step of WriteFile and ReplaceDir
// with the step's name. Only the modref_crashtest build sets it (crash.go),
// to kill the process at a chosen step, so that tests can show what a
// SIGKILL at every step of a save leaves.
var crashPoint func(step string)

// reached marks a step of WriteFile or ReplaceDir for crashPoint.
func reached(step string) {
	if crashPoint != nil {
		crashPoint(step)
	}
}

// HandleSignals makes SIGINT, SIGTERM and SIGHUP remove the temporary files
// and directories being written, then exit with status 128+signal. Call it
// once, from main.
func HandleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		commit.Lock() // never released: the process exits below
		if f, ok := onSignal.Load().(func()); ok {
			f()
		}
		pending.Range(func(k, _ any) bool {
			removeAll(k.(string))
			return true
		})
		code := 1
		if n, ok := s.(syscall.Signal); ok {
			code = 128 + int(n)
		}
		os.Exit(code)
	}()
}

// onSignal holds the function OnSignal registered.
var onSignal atomic.Value

// OnSignal registers f to run first when HandleSignals's handler ends the
// process (a command's own cleanup: `modref fuzz` kills the candidate's
// process groups and removes its scratch directory). A later call replaces
// an earlier one.
func OnSignal(f func()) { onSignal.Store(f) }

// removeAll removes path, trying again while it still exists: a fill
// function may still be writing into a temporary directory while the
// signal handler removes it, and a file created between RemoveAll's
// reading of a directory and its removal makes that removal fail.
func removeAll(path string) {
	for range 100 {
		os.RemoveAll(path)
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
}

// IsTempName reports whether name (a base name) has the form of the
// temporary names this package makes, whether or not its process runs.
func IsTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tmpTag) && filepath.Base(name) == name
}
