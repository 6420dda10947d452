package format

import (
	"errors"
	"fmt"
	"slices"

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
// MoDE layer and a model case layers, that the configuration is valid
// (package spec's rules and size bounds; FitsSeqLen checks those that
// depend on the sequence length). Each error names the field as the file writes it:
// config.seq_len, config.layer.d_model, config.layers[1].layer.capacity.tokens.
func (c CaseConfig) Validate(kind string) error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("config.batch = %d, want >= 1", c.Batch)
	case c.SeqLen < 1:
		return fmt.Errorf("config.seq_len = %d, want >= 1", c.SeqLen)
	}
	if c.ValidLengths != nil {
		if len(c.ValidLengths) != c.Batch {
			return fmt.Errorf("config.valid_lengths has %d entries, want one per batch row (config.batch = %d)", len(c.ValidLengths), c.Batch)
		}
		for b, v := range c.ValidLengths {
			if v < 0 || v > c.SeqLen {
				return fmt.Errorf("config.valid_lengths[%d] = %d, want 0 <= V_b <= config.seq_len = %d", b, v, c.SeqLen)
			}
		}
	}
	switch {
	case kind == KindLayer && c.Layer == nil:
		return fmt.Errorf("a layer case needs config.layer")
	case kind == KindMoDE && c.MoDE == nil:
		return fmt.Errorf("a mode case needs config.mode")
	case kind == KindMoDE && c.ValidLengths != nil:
		return fmt.Errorf("a mode case has no padding (docs/spec.md §14); leave out config.valid_lengths")
	case kind == KindLayer || kind == KindMoDE:
	case len(c.Layers) == 0:
		return fmt.Errorf("a %s case needs config.layers", kind)
	case c.Vocab < 2:
		return fmt.Errorf("config.vocab = %d, want >= 2", c.Vocab)
	}
	// The configuration's own rules, its size bounds among them (spec.MaxD,
	// spec.MaxDFF, ...), before any size of it is used.
	var err error
	prefix := "config."
	switch kind {
	case KindLayer:
		err, prefix = c.Layer.Validate(), "config.layer."
	case KindMoDE:
		err, prefix = c.MoDE.Validate(), "config.mode."
	default:
		err = c.ModelConfig().Validate()
	}
	if fe := (*spec.FieldError)(nil); errors.As(err, &fe) {
		return errors.New(fe.Keyed(prefix))
	}
	return err
}

// FitsSeqLen checks the rules that depend on the sequence length as ref
// applies them: an integer capacity C <= S, log scaling's longest valid
// length <= S_max, and a learned position embedding for every position.
func (c CaseConfig) FitsSeqLen(kind string) error {
	type routed struct {
		at  string
		cfg spec.Config
	}
	var layers []routed
	switch kind {
	case KindLayer:
		layers = append(layers, routed{"config.layer.", *c.Layer})
	case KindModel, KindDecode:
		for l, ml := range c.Layers {
			if ml.Routed {
				layers = append(layers, routed{fmt.Sprintf("config.layers[%d].layer.", l), ml.Config})
			}
		}
		if c.Layers[0].Config.Block.Positions == spec.PositionLearned && c.MaxLen < c.SeqLen {
			return fmt.Errorf("config.max_len = %d learned position embeddings for config.seq_len = %d positions, want max_len >= seq_len", c.MaxLen, c.SeqLen)
		}
	}
	longest := c.SeqLen
	if c.ValidLengths != nil {
		longest = slices.Max(c.ValidLengths)
	}
	for _, l := range layers {
		switch cp := l.cfg.Capacity; {
		case cp.Kind == spec.CapacityInteger && cp.Tokens > c.SeqLen:
			return fmt.Errorf("%scapacity.tokens = %d, want C <= config.seq_len = %d", l.at, cp.Tokens, c.SeqLen)
		case cp.Kind == spec.CapacityLog && cp.MaxLen < longest:
			return fmt.Errorf("%scapacity.max_len = %d, want S_max >= %d, the longest valid row (config.seq_len, config.valid_lengths)", l.at, cp.MaxLen, longest)
		}
	}
	return nil
}

// ModelConfig returns the model configuration of a model or decode case.
func (c CaseConfig) ModelConfig() spec.ModelConfig {
	return spec.ModelConfig{Vocab: c.Vocab, MaxLen: c.MaxLen, Layers: c.Layers}
}
