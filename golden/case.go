package golden

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/modref/modref/internal/atomicfile"
)

// Case is one golden case: its manifest and its arrays.
type Case struct {
	Manifest *Manifest
	Arrays   map[string]*Array
	// Separation says, for a generated layer case whose routing was moved
	// apart (genLayer), that it was, how, and what the case therefore
	// does not exercise; "" otherwise. It is not stored: a loaded case
	// has it empty.
	Separation string
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

// maxCaseElements bounds the values of all arrays a manifest lists, and so
// the memory a corpus case (which -dir may point anywhere) makes Load
// allocate: 256 MiB of float64. The largest corpus case holds under
// 10,000; a generated case at production shape holds far more: the
// Llama-3-style layer of docs/examples/llama3-layer-d512-s2048.json
// (d = 512, d_ff = 1792, B = 3, S = 2048) holds 2.0e7 values, its
// parameters and their gradients 7.6e6, its input, upstream gradient,
// output and input gradient 1.3e7.
const maxCaseElements = 1 << 25

// ErrManifestArrays marks a manifest whose configuration disagrees with its
// arrays.
var ErrManifestArrays = errors.New("the manifest's configuration disagrees with its arrays")

// checkSizes checks the arrays against the configuration's sizes, which the
// judge indexes with: every array of rank 2 or more other than parameters
// and their gradients is B×S×…, except lists of selected positions, B×k
// with k ≤ S, whose entries are −1 or positions in [0, S), and a MoDE
// case's expert choice, B×E′×k_e positions in [0, S); input.valid holds
// the valid lengths; token ids lie in [0, vocab) and targets in
// [−1, vocab).
func (c *Case) checkSizes() error {
	cfg := c.Manifest.Config
	for _, info := range c.Manifest.Arrays {
		a := c.Arrays[info.Name]
		name := info.Name
		if len(a.Shape) < 2 || strings.HasPrefix(name, "param.") || strings.Contains(name, "grad.param.") {
			continue
		}
		if strings.HasSuffix(name, "selected") {
			if a.Shape[0] != cfg.Batch || a.Shape[1] > cfg.SeqLen {
				return fmt.Errorf("%w: array %q has shape %v, want %d×k with k ≤ seq_len %d", ErrManifestArrays, name, a.Shape, cfg.Batch, cfg.SeqLen)
			}
			if err := checkRange(a, name, -1, int64(cfg.SeqLen)-1); err != nil {
				return err
			}
			continue
		}
		if strings.HasSuffix(name, "expert_choice") {
			if len(a.Shape) != 3 || a.Shape[0] != cfg.Batch || a.Shape[2] > cfg.SeqLen {
				return fmt.Errorf("%w: array %q has shape %v, want %d×E′×k_e with k_e ≤ seq_len %d", ErrManifestArrays, name, a.Shape, cfg.Batch, cfg.SeqLen)
			}
			if err := checkRange(a, name, 0, int64(cfg.SeqLen)-1); err != nil {
				return err
			}
			continue
		}
		if a.Shape[0] != cfg.Batch || a.Shape[1] != cfg.SeqLen {
			return fmt.Errorf("%w: array %q has shape %v, want batch %d × seq_len %d first", ErrManifestArrays, name, a.Shape, cfg.Batch, cfg.SeqLen)
		}
	}
	if a, ok := c.Arrays["input.valid"]; ok {
		for b, v := range a.I {
			want := int64(cfg.SeqLen)
			if cfg.ValidLengths != nil && b < len(cfg.ValidLengths) {
				want = int64(cfg.ValidLengths[b])
			}
			if len(a.I) != cfg.Batch || v != want {
				return fmt.Errorf("%w: input.valid is %v, config.valid_lengths %v (batch %d, seq_len %d)", ErrManifestArrays, a.I, cfg.ValidLengths, cfg.Batch, cfg.SeqLen)
			}
		}
	}
	if cfg.Vocab > 0 {
		if a, ok := c.Arrays["input.tokens"]; ok && a.I != nil {
			if err := checkRange(a, "input.tokens", 0, int64(cfg.Vocab)-1); err != nil {
				return err
			}
		}
		if a, ok := c.Arrays["input.targets"]; ok && a.I != nil {
			if err := checkRange(a, "input.targets", -1, int64(cfg.Vocab)-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRange reports the first integer of a outside [lo, hi].
func checkRange(a *Array, name string, lo, hi int64) error {
	for k, v := range a.I {
		if v < lo || v > hi {
			return fmt.Errorf("%w: array %q holds %d at %v, outside [%d, %d]", ErrManifestArrays, name, v, a.Index(k), lo, hi)
		}
	}
	return nil
}

// Write writes the case into dir as NAME.json and NAME.npz, each through a
// temporary file renamed into place. The manifest's array list must match
// the arrays.
func (c *Case) Write(dir string) error {
	files, err := c.files()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return nil
}

// file is one file of a case: its name in a corpus directory and its bytes.
type file struct {
	name string
	data []byte
}

// files returns the case's two files, NAME.npz then NAME.json, after
// checking that the manifest's array list matches the arrays.
func (c *Case) files() ([]file, error) {
	m := c.Manifest
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("case %s: %w", m.Name, err)
	}
	if len(m.Arrays) != len(c.Arrays) {
		return nil, fmt.Errorf("case %s: the manifest lists %d arrays, there are %d", m.Name, len(m.Arrays), len(c.Arrays))
	}
	for _, info := range m.Arrays {
		a, ok := c.Arrays[info.Name]
		if !ok || a.DType != info.DType || !slices.Equal(a.Shape, info.Shape) {
			return nil, errors.New("case " + m.Name + ": array " + info.Name + " does not match its manifest entry")
		}
	}
	raw, err := m.encode()
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", m.Name, err)
	}
	npz, err := encodeNPZ(c.Arrays)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", m.Name, err)
	}
	return []file{{m.Name + ".npz", npz}, {m.Name + ".json", raw}}, nil
}
