// Package atomicfile writes files and directories so that a reader sees
// either the old contents or the new, never a mixture or a half-written
// file: everything is written under a temporary name beside its target and
// renamed into place. Temporary files are created with ordinary modes (0644
// files, 0755 directories, less the umask), removed on every error, on
// SIGINT, SIGTERM and SIGHUP (see HandleSignals), and, when a SIGKILL left
// one behind, by the next write to the same target.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	var r [6]byte
	rand.Read(r[:])
	return filepath.Join(dir, "."+base+tmpTag+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(r[:]))
}

// removeStale removes temporary names for base in dir whose process no
// longer runs.
func removeStale(dir, base string) {
	if dir == "" {
		dir = "."
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "."+base+tmpTag+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), "."+base+tmpTag)
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		os.RemoveAll(m)
	}
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

// WriteFile writes data to path: to a new temporary file beside it (mode
// 0644 less the umask), synced, then renamed over path. On any error path
// is unchanged and the temporary file is gone.
func WriteFile(path string, data []byte) error {
	tmp := tempName(path)
	pending.Store(tmp, true)
	defer pending.Delete(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		commit.Lock()
		err = os.Rename(tmp, path)
		commit.Unlock()
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ReplaceDir replaces the directory dir, which must exist, by a new one
// holding exactly what fill writes into the temporary directory it is
// given (created beside dir, mode 0755 less the umask). On Linux the two
// are exchanged in one atomic rename; elsewhere dir is missing for the
// moment between two renames. On any error dir is unchanged and the
// temporary directory is gone.
func ReplaceDir(dir string, fill func(tmp string) error) error {
	// The directory itself is replaced, not a link to it, and "." has a
	// parent to hold the temporary directory.
	real, err := filepath.EvalSymlinks(dir)
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
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	commit.Lock()
	err = exchange(tmp, dir)
	commit.Unlock()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("replacing %s: %w", dir, err)
	}
	// tmp now holds the old contents.
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing the old contents of %s (now %s): %w", dir, tmp, err)
	}
	return nil
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
