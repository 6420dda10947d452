package golden

import (
	"fmt"

	"github.com/modref/modref/ref"
)

// CaseConfig is a case's configuration in docs/spec.md's terms
// (docs/golden-format.md, "config").
type CaseConfig struct {
	Batch        int   `json:"batch"`
	SeqLen       int   `json:"seq_len"`
	ValidLengths []int `json:"valid_lengths,omitempty"`
	// Layer is the routed layer of a layer case.
	Layer *LayerConfig `json:"layer,omitempty"`
	// Vocab, MaxLen and Layers describe a model or decode case.
	Vocab  int                `json:"vocab,omitempty"`
	MaxLen int                `json:"max_len,omitempty"`
	Layers []ModelLayerConfig `json:"layers,omitempty"`
}

// validate checks what a reader relies on before it looks at any array: the
// sizes, the valid lengths, and that a layer case has a layer and a model
// case layers. The routing choices themselves are ref's to validate.
func (c CaseConfig) validate(kind string) error {
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
	case kind != KindLayer && len(c.Layers) == 0:
		return fmt.Errorf("a %s case needs \"layers\"", kind)
	case kind != KindLayer && c.Vocab < 2:
		return fmt.Errorf("vocab = %d, want >= 2", c.Vocab)
	}
	return nil
}

// ModelLayerConfig is one layer of a model: routed or dense.
type ModelLayerConfig struct {
	Routed bool        `json:"routed"`
	Layer  LayerConfig `json:"layer"`
}

// LayerConfig is ref.Config with docs/spec.md's names as JSON keys.
type LayerConfig struct {
	DModel            int            `json:"d_model"`
	Heads             int            `json:"heads"`
	DFF               int            `json:"d_ff"`
	Norm              string         `json:"norm"`
	NormEps           float64        `json:"norm_eps"`
	MLP               string         `json:"mlp"`
	Positions         string         `json:"positions"`
	RoPEBase          float64        `json:"rope_base"`
	Router            string         `json:"router"`
	Jitter            float64        `json:"jitter"`
	Capacity          CapacityConfig `json:"capacity"`
	Weighting         string         `json:"weighting"`
	Compute           string         `json:"compute"`
	MLPOnly           bool           `json:"mlp_only"`
	Aux               string         `json:"aux"`
	AuxWeight         float64        `json:"aux_weight"`
	LoadBalanceWeight float64        `json:"load_balance_weight"`
	PredictorHidden   int            `json:"predictor_hidden"`
	Causal            string         `json:"causal"`
}

// CapacityConfig is ref.Capacity with docs/spec.md's names as JSON keys.
type CapacityConfig struct {
	Kind   string  `json:"kind"`
	Ratio  float64 `json:"ratio,omitempty"`
	Tokens int     `json:"tokens,omitempty"`
	MaxLen int     `json:"max_len,omitempty"`
}

// layerConfigOf returns the JSON form of a ref configuration. The predictor
// width is written out (d/2 unless set) so that a reader need not know the
// default.
func layerConfigOf(c ref.Config) LayerConfig {
	b := c.Block
	return LayerConfig{
		DModel: b.D, Heads: b.Heads, DFF: b.DFF,
		Norm: string(b.Norm), NormEps: b.NormEps, MLP: string(b.MLP),
		Positions: string(b.Positions), RoPEBase: b.RoPEBase,
		Router: string(c.Router), Jitter: c.Jitter,
		Capacity: CapacityConfig{
			Kind: string(c.Capacity.Kind), Ratio: c.Capacity.Ratio,
			Tokens: c.Capacity.Tokens, MaxLen: c.Capacity.MaxLen,
		},
		Weighting: string(c.Weighting), Compute: string(c.Compute), MLPOnly: c.MLPOnly,
		Aux: string(c.Aux), AuxWeight: c.AuxWeight, LoadBalanceWeight: c.LoadBalanceWeight,
		PredictorHidden: c.PredictorWidth(), Causal: string(c.Causal),
	}
}

// Ref returns the ref configuration the JSON form describes.
func (l LayerConfig) Ref() ref.Config {
	return ref.Config{
		Block: ref.BlockConfig{
			D: l.DModel, Heads: l.Heads, DFF: l.DFF,
			Norm: ref.NormKind(l.Norm), NormEps: l.NormEps, MLP: ref.Activation(l.MLP),
			Positions: ref.PositionKind(l.Positions), RoPEBase: l.RoPEBase,
		},
		Router: ref.RouterKind(l.Router), Jitter: l.Jitter,
		Capacity: ref.Capacity{
			Kind: ref.CapacityKind(l.Capacity.Kind), Ratio: l.Capacity.Ratio,
			Tokens: l.Capacity.Tokens, MaxLen: l.Capacity.MaxLen,
		},
		Weighting: ref.Weighting(l.Weighting), Compute: ref.Compute(l.Compute), MLPOnly: l.MLPOnly,
		Aux: ref.AuxObjective(l.Aux), AuxWeight: l.AuxWeight, LoadBalanceWeight: l.LoadBalanceWeight,
		PredictorHidden: l.PredictorHidden, Causal: ref.CausalRouting(l.Causal),
	}
}

// modelConfig returns the ref model configuration of a model or decode case.
func (c CaseConfig) modelConfig() ref.ModelConfig {
	mc := ref.ModelConfig{Vocab: c.Vocab, MaxLen: c.MaxLen}
	for _, l := range c.Layers {
		mc.Layers = append(mc.Layers, ref.ModelLayer{Routed: l.Routed, Config: l.Layer.Ref()})
	}
	return mc
}
