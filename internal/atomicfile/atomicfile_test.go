package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestWriteFile: the file is replaced whole with mode 0644 less the umask;
// a failed rename leaves the target unchanged and no temporary file;
// a temporary file of a dead process is removed by the next write.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.xml")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".r.xml"+tmpTag+"2147483646-0")
	os.WriteFile(stale, nil, 0o600)
	if err := WriteFile(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(raw) != "new" || fi.Mode().Perm() != 0o600 {
		t.Errorf("content %q mode %v, want \"new\" and the old file's 0600", raw, fi.Mode())
	}
	fresh := filepath.Join(dir, "s.xml")
	if err := WriteFile(fresh, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(fresh)
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if fi.Mode().Perm() != 0o644&^os.FileMode(umask) {
		t.Errorf("a new file has mode %v, want 0644 less the umask", fi.Mode())
	}
	os.Remove(fresh)
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only r.xml", names)
	}
	// A target that is a non-empty directory cannot be renamed over.
	sub := filepath.Join(dir, "d")
	os.MkdirAll(filepath.Join(sub, "x"), 0o755)
	if err := WriteFile(sub, []byte("x")); err == nil {
		t.Error("writing over a non-empty directory succeeded")
	}
	if names := entries(t, dir); len(names) != 2 {
		t.Errorf("after a failed write the directory holds %v, want r.xml and d", names)
	}
}

// TestReplaceDir: the directory's contents are swapped whole and its mode
// kept; a failing fill leaves the old contents and no temporary directory.
func TestReplaceDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "c")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "old"), nil, 0o644)
	if err := ReplaceDir(dir, func(tmp string) error { return os.ErrInvalid }); err == nil {
		t.Error("a failing fill reported success")
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "old" {
		t.Errorf("after a failed fill: %v, want [old]", names)
	}
	if err := ReplaceDir(dir, func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "new"), nil, 0o644) }); err != nil {
		t.Fatal(err)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "new" {
		t.Errorf("after ReplaceDir: %v, want [new]", names)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("after ReplaceDir the directory's mode is %v (%v), want the old 0750", fi.Mode(), err)
	}
	if names := entries(t, parent); len(names) != 1 {
		t.Errorf("beside the directory: %v, want only c", names)
	}
}

// TestSignalRemovesTemporaries: a process terminated while it fills a
// replacement directory and writes a file leaves neither temporary behind,
// and the old contents whole. The child is this test binary (see
// TestMain).
func TestSignalRemovesTemporaries(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "c")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "old"), []byte("old"), 0o644)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("child said %q", line)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("child exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	if names := entries(t, parent); len(names) != 2 {
		t.Errorf("beside the directory after SIGTERM: %v, want c and r.xml only", names)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "old" {
		t.Errorf("directory after SIGTERM: %v, want [old]", names)
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv("ATOMICFILE_CHILD"); dir != "" {
		HandleSignals()
		ReplaceDir(dir, func(tmp string) error {
			os.WriteFile(filepath.Join(tmp, "new"), nil, 0o644)
			// A file being written at the same moment, held open.
			tmpFile := tempName(filepath.Join(filepath.Dir(dir), "r.xml"))
			pending.Store(tmpFile, true)
			os.WriteFile(tmpFile, []byte("partial"), 0o644)
			os.WriteFile(filepath.Join(filepath.Dir(dir), "r.xml"), []byte("old report"), 0o644)
			fmt.Println("ready")
			time.Sleep(time.Minute)
			return nil
		})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWriteFileOnlyOverRegularFiles: a device, FIFO or directory at the
// path, or a link to nothing, is refused with ErrNotRegular and left as it
// is, by Check before anything is written and by WriteFile; a link to a
// regular file is written through and stays a link; the replaced file's
// mode is kept.
func TestWriteFileOnlyOverRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "empty")
	os.Mkdir(sub, 0o755)
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nowhere", "x"), dangling)
	devLink := filepath.Join(dir, "null")
	os.Symlink("/dev/null", devLink)
	for _, p := range []string{"/dev/null", fifo, sub, dangling, devLink} {
		before, _ := os.Lstat(p)
		if err := Check(p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Check(%s) = %v, want ErrNotRegular", p, err)
		}
		if err := WriteFile(p, []byte("x")); !errors.Is(err, ErrNotRegular) {
			t.Errorf("WriteFile(%s) = %v, want ErrNotRegular", p, err)
		}
		after, err := os.Lstat(p)
		if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
			t.Errorf("%s changed: %v, %v", p, after, err)
		}
	}
	if err := Check(filepath.Join(dir, "no-such-dir", "r.xml")); err == nil {
		t.Error("Check of a path in a missing directory succeeded")
	}

	real := filepath.Join(dir, "real.xml")
	os.WriteFile(real, []byte("old"), 0o600)
	link := filepath.Join(dir, "link.xml")
	os.Symlink(real, link)
	if err := WriteFile(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(link)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi, err)
	}
	raw, _ := os.ReadFile(real)
	fi, _ = os.Stat(real)
	if string(raw) != "new" || fi.Mode().Perm() != 0o600 {
		t.Errorf("through the link: %q mode %v, want \"new\" and 0600 kept", raw, fi.Mode())
	}
}
