package golden

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Case is one golden case: its manifest and its arrays.
type Case struct {
	Manifest *Manifest
	Arrays   map[string]*Array
}

// ManifestPath returns the manifest file path of case name in dir.
func ManifestPath(dir, name string) string { m, _ := Paths(dir, name); return m }

// Paths returns the manifest and array file paths of case name in dir.
func Paths(dir, name string) (manifest, arrays string) {
	return filepath.Join(dir, name+".json"), filepath.Join(dir, name+".npz")
}

// List returns the names of the cases in dir, sorted: every NAME.json that
// has a NAME.npz beside it.
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading corpus %s: %w", dir, unwrapPath(err))
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name+".npz")); err == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("corpus %s holds no cases (NAME.json with NAME.npz)", dir)
	}
	return names, nil
}

// Load reads case name from dir and checks that its arrays are exactly those
// its manifest lists, with the listed dtypes and shapes.
func Load(dir, name string) (*Case, error) {
	mpath, apath := Paths(dir, name)
	m, err := ReadManifest(mpath)
	if err != nil {
		return nil, err
	}
	if m.Name != name {
		return nil, fmt.Errorf("%s: name is %q, want %q as in the file name", mpath, m.Name, name)
	}
	arrays, err := ReadNPZ(apath)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool)
	for _, info := range m.Arrays {
		listed[info.Name] = true
		a, ok := arrays[info.Name]
		if !ok {
			return nil, fmt.Errorf("%s: array %q listed in %s is missing", apath, info.Name, filepath.Base(mpath))
		}
		if a.DType != info.DType || !slices.Equal(a.Shape, info.Shape) {
			return nil, fmt.Errorf("%s: array %q is %s %v, the manifest says %s %v",
				apath, info.Name, a.DType, a.Shape, info.DType, info.Shape)
		}
		if k := a.firstNonFinite(); k >= 0 {
			return nil, fmt.Errorf("%s: array %q holds %v at %v", apath, info.Name, a.F[k], a.Index(k))
		}
	}
	for n := range arrays {
		if !listed[n] {
			return nil, fmt.Errorf("%s: array %q is not listed in %s", apath, n, filepath.Base(mpath))
		}
	}
	return &Case{Manifest: m, Arrays: arrays}, nil
}

// Write writes the case into dir as NAME.json and NAME.npz, each through a
// temporary file renamed into place. The manifest's array list must match
// the arrays.
func (c *Case) Write(dir string) error {
	m := c.Manifest
	if err := m.validate(); err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	if len(m.Arrays) != len(c.Arrays) {
		return fmt.Errorf("case %s: the manifest lists %d arrays, there are %d", m.Name, len(m.Arrays), len(c.Arrays))
	}
	for _, info := range m.Arrays {
		a, ok := c.Arrays[info.Name]
		if !ok || a.DType != info.DType || !slices.Equal(a.Shape, info.Shape) {
			return errors.New("case " + m.Name + ": array " + info.Name + " does not match its manifest entry")
		}
	}
	raw, err := m.encode()
	if err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	mpath, apath := Paths(dir, m.Name)
	if err := WriteNPZ(apath, c.Arrays); err != nil {
		return err
	}
	return writeFileAtomic(mpath, raw)
}
