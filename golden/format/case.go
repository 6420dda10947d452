package format

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/spec"
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

// MaxCaseElements bounds the values of all arrays a manifest lists, and so
// the memory a corpus case (which -dir may point anywhere) makes Load
// allocate: 2^29 values, 4 GiB of float64 (a reader widens every value to
// float64), so that check, which holds the case and a candidate of at most
// as many values, stays within 8 GiB, a third of a 24 GB machine. The
// largest corpus case holds under 10,000; a generated case at production
// shape holds far more: the Llama-3-style layer of
// docs/examples/llama3-layer-d512-s2048.json (d = 512, d_ff = 1792,
// B = 3, S = 2048) 2.0e7 values, and a layer at Llama-3-8B's width,
// docs/examples/llama3-8b-layer-s2048.json (d = 4096, d_ff = 14336,
// B = 1, S = 2048), 4.7e8: its 2.2e8 parameters and as many gradients,
// its input, upstream gradient, output and input gradient 3.4e7.
const MaxCaseElements = 1 << 29

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
		// The shape is the manifest's, which Load checked the array's is;
		// an array LoadJudged left out has no values to check.
		a, shape := c.Arrays[info.Name], info.Shape
		name := info.Name
		if len(shape) < 2 || strings.HasPrefix(name, "param.") || strings.Contains(name, "grad.param.") {
			continue
		}
		if strings.HasSuffix(name, "selected") {
			if shape[0] != cfg.Batch || shape[1] > cfg.SeqLen {
				return fmt.Errorf("%w: array %q has shape %v, want %d×k with k ≤ seq_len %d", ErrManifestArrays, name, shape, cfg.Batch, cfg.SeqLen)
			}
			if err := checkRange(a, name, -1, int64(cfg.SeqLen)-1); err != nil {
				return err
			}
			continue
		}
		if strings.HasSuffix(name, "expert_choice") {
			if len(shape) != 3 || shape[0] != cfg.Batch || shape[2] > cfg.SeqLen {
				return fmt.Errorf("%w: array %q has shape %v, want %d×E′×k_e with k_e ≤ seq_len %d", ErrManifestArrays, name, shape, cfg.Batch, cfg.SeqLen)
			}
			if err := checkRange(a, name, 0, int64(cfg.SeqLen)-1); err != nil {
				return err
			}
			continue
		}
		if shape[0] != cfg.Batch || shape[1] != cfg.SeqLen {
			return fmt.Errorf("%w: array %q has shape %v, want batch %d × seq_len %d first", ErrManifestArrays, name, shape, cfg.Batch, cfg.SeqLen)
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
	files, err := c.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.Name), f.Data); err != nil {
			return err
		}
	}
	return nil
}

// File is one file of a case: its name in a corpus directory and its bytes.
type File struct {
	Name string
	Data []byte
}

// Files returns the case's two files, NAME.npz then NAME.json, after
// checking that the manifest's array list matches the arrays.
func (c *Case) Files() ([]File, error) {
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
	raw, err := m.Encode()
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", m.Name, err)
	}
	npz, err := encodeNPZ(c.Arrays, false)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", m.Name, err)
	}
	return []File{{m.Name + ".npz", npz}, {m.Name + ".json", raw}}, nil
}

// LayerConfig returns the configuration of the routed layer an array name
// prefix ("expected." or "expected.L<l>.") refers to.
func (c *Case) LayerConfig(prefix string) *spec.Config {
	cfg := c.Manifest.Config
	if cfg.Layer != nil {
		return cfg.Layer
	}
	var l int
	if _, err := fmt.Sscanf(prefix, "expected.L%d.", &l); err != nil || l < 0 || l >= len(cfg.Layers) {
		return nil
	}
	return &cfg.Layers[l].Config
}

// Array returns a case array, or an error naming it.
func (c *Case) Array(name string) (*Array, error) {
	a, ok := c.Arrays[name]
	if !ok {
		return nil, fmt.Errorf("array %q is missing", name)
	}
	return a, nil
}

// Candidate returns a candidate holding the case's own expected values,
// under their candidate names: copies, which a caller may change.
func (c *Case) Candidate() map[string]*Array {
	cand := make(map[string]*Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == RoleExpected {
			a := *c.Arrays[info.Name]
			a.F, a.I = slices.Clone(a.F), slices.Clone(a.I)
			cand[CandidateName(info.Name)] = &a
		}
	}
	return cand
}

// CandidateArrays returns the arrays of c a candidate reads: its inputs
// (token ids, valid lengths, the random router's noise and the jitter
// among them), parameters and upstream gradients; never an expected
// array, which is the answer its output is judged against.
func (c *Case) CandidateArrays() map[string]*Array {
	in := make(map[string]*Array, len(c.Arrays))
	for _, info := range c.Manifest.Arrays {
		if info.Role != RoleExpected {
			in[info.Name] = c.Arrays[info.Name]
		}
	}
	return in
}

// WriteScratch writes into dir what a candidate of the case is handed
// (`modref fuzz`, docs/fuzzing.md): NAME.json, the whole manifest, which
// lists the arrays to compute with their shapes and dtypes, and NAME.npz
// holding CandidateArrays alone, without the answer. It writes with plain
// writes, neither synced nor renamed into place: for a scratch directory
// of the caller's own that nothing else reads and that is discarded,
// where a sync would cost more than the rest of the case (15 ms of its 17
// on this machine) and buy nothing.
func (c *Case) WriteScratch(dir string) error {
	m := c.Manifest
	if err := m.validate(); err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	raw, err := m.Encode()
	if err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	npz, err := encodeNPZ(c.CandidateArrays(), true)
	if err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	manifest, arrays := Paths(dir, m.Name)
	if err := os.WriteFile(arrays, npz, 0o644); err != nil {
		return err
	}
	return os.WriteFile(manifest, raw, 0o644)
}
