package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
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
	if string(raw) != "new" || fi.Mode().Perm()&^0o022 != 0o644&^0o022 || fi.Mode().Perm() == 0o600 {
		t.Errorf("content %q mode %v, want \"new\" and 0644 less the umask", raw, fi.Mode())
	}
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

// TestReplaceDir: the directory's contents are swapped whole; a failing
// fill leaves the old contents and no temporary directory.
func TestReplaceDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "c")
	os.Mkdir(dir, 0o755)
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
	if names := entries(t, parent); len(names) != 1 {
		t.Errorf("beside the directory: %v, want only c", names)
	}
}
