package golden

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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

// List returns the names of the cases in dir, sorted: Dir(dir).List().
func List(dir string) ([]string, error) { return Dir(dir).List() }

// Load reads case name from dir and checks its arrays: Dir(dir).Load(name).
func Load(dir, name string) (*Case, error) { return Dir(dir).Load(name) }

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
