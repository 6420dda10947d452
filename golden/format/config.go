package format

import (
	"fmt"

	"github.com/modref/modref/spec"
)

// CaseConfig is a case's configuration (docs/golden-format.md, "config"):
// the batch shape around the layer or model configuration, whose JSON form
// is package spec's.
type CaseConfig struct {
	Batch        int   `json:"batch"`
	SeqLen       int   `json:"seq_len"`
	ValidLengths []int `json:"valid_lengths,omitempty"`
	// Layer is the routed layer of a layer case.
	Layer *spec.Config `json:"layer,omitempty"`
	// Vocab, MaxLen and Layers describe a model or decode case.
	Vocab  int               `json:"vocab,omitempty"`
	MaxLen int               `json:"max_len,omitempty"`
	Layers []spec.ModelLayer `json:"layers,omitempty"`
	// MoDE is the Mixture-of-Depths-and-Experts layer of a mode case
	// (docs/spec.md §14).
	MoDE *spec.MoDEConfig `json:"mode,omitempty"`
}

// Validate checks what a reader relies on before it looks at any array: the
// sizes, the valid lengths, that a layer case has a layer, a mode case a
// MoDE layer and a model case layers, and that the configuration is valid
// (package spec's rules and size bounds; the checks that depend on the
// sequence length are ref's).
func (c CaseConfig) Validate(kind string) error {
	if c.Batch < 1 || c.SeqLen < 1 {
		return fmt.Errorf("batch = %d, seq_len = %d: want both >= 1", c.Batch, c.SeqLen)
	}
	if c.ValidLengths != nil {
		if len(c.ValidLengths) != c.Batch {
			return fmt.Errorf("valid_lengths has %d entries, want one per batch row (%d)", len(c.ValidLengths), c.Batch)
		}
		for b, v := range c.ValidLengths {
			if v < 0 || v > c.SeqLen {
				return fmt.Errorf("valid_lengths[%d] = %d, want 0 <= V_b <= seq_len = %d", b, v, c.SeqLen)
			}
		}
	}
	switch {
	case kind == KindLayer && c.Layer == nil:
		return fmt.Errorf("a layer case needs \"layer\"")
	case kind == KindMoDE && c.MoDE == nil:
		return fmt.Errorf("a mode case needs \"mode\"")
	case kind == KindMoDE && c.ValidLengths != nil:
		return fmt.Errorf("a mode case has no padding (docs/spec.md §14); leave out \"valid_lengths\"")
	case kind == KindLayer || kind == KindMoDE:
	case len(c.Layers) == 0:
		return fmt.Errorf("a %s case needs \"layers\"", kind)
	case c.Vocab < 2:
		return fmt.Errorf("vocab = %d, want >= 2", c.Vocab)
	}
	// The configuration's own rules, its size bounds among them (spec.MaxD,
	// spec.MaxDFF, ...), before any size of it is used.
	switch kind {
	case KindLayer:
		return c.Layer.Validate()
	case KindMoDE:
		return c.MoDE.Validate()
	}
	return c.ModelConfig().Validate()
}

// ModelConfig returns the model configuration of a model or decode case.
func (c CaseConfig) ModelConfig() spec.ModelConfig {
	return spec.ModelConfig{Vocab: c.Vocab, MaxLen: c.MaxLen, Layers: c.Layers}
}
