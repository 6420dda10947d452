package golden

import (
	"fmt"
	"os"
)

// GenerateUnmeasured generates the case g describes as GenerateFromConfig
// does (the same draws, redrawn until every routing decision is clear of a
// tie, so the same arrays), but leaves its catches empty instead of
// measuring them: measuring recomputes the case under every deviation of
// docs/spec.md §11 with finite-difference gradients, which a fuzzer, that
// generates a case per draw and judges a candidate on it, does not need
// (`modref fuzz`, docs/fuzzing.md).
func GenerateUnmeasured(g *GenConfig) (*Case, error) {
	c, err := generateCase(g)
	if err != nil {
		return nil, err
	}
	c.Manifest.Catches = []string{}
	return c, nil
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
	raw, err := m.encode()
	if err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	npz, err := encodeNPZ(c.CandidateArrays())
	if err != nil {
		return fmt.Errorf("case %s: %w", m.Name, err)
	}
	manifest, arrays := Paths(dir, m.Name)
	if err := os.WriteFile(arrays, npz, 0o644); err != nil {
		return err
	}
	return os.WriteFile(manifest, raw, 0o644)
}
