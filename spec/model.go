package spec

import "fmt"

// PatternKind names a layer pattern of docs/spec.md §10.
type PatternKind string

// Layer patterns (docs/spec.md §10).
const (
	// PatternAll routes every layer.
	PatternAll PatternKind = "all"
	// PatternEveryOther routes layers 0, 2, 4, ... (the blog seed's choice).
	PatternEveryOther PatternKind = "every_other"
	// PatternEveryNth routes layer l iff l >= Offset and (l - Offset) % Every == 0.
	PatternEveryNth PatternKind = "every_nth"
	// PatternDenseEnds keeps the first DenseStart and the last DenseEnd layers
	// dense and routes every layer between them.
	PatternDenseEnds PatternKind = "dense_ends"
	// PatternList routes exactly the layers listed.
	PatternList PatternKind = "list"
)

// Pattern says which layers of a model are routed (docs/spec.md §10).
type Pattern struct {
	Kind       PatternKind
	Every      int   // every_nth: n >= 1
	Offset     int   // every_nth: first routed layer, 0 <= Offset < L
	DenseStart int   // dense_ends: dense layers at the start (5 in the GPT codebase seed)
	DenseEnd   int   // dense_ends: dense layers at the end (1 in the GPT codebase seed)
	Layers     []int // list: routed layer indices, each in [0, L), no repeats
}

// Routed is docs/spec.md §10: for each of the nLayers layers, whether it is
// routed.
func (p Pattern) Routed(nLayers int) ([]bool, error) {
	if nLayers < 1 {
		return nil, fmt.Errorf("pattern: %d layers, want >= 1", nLayers)
	}
	if err := checkMax("pattern", "layers", "layers", nLayers, MaxLayers, "MaxLayers"); err != nil {
		return nil, err
	}
	routed := make([]bool, nLayers)
	switch p.Kind {
	case PatternAll:
		for l := range routed {
			routed[l] = true
		}
	case PatternEveryOther:
		for l := 0; l < nLayers; l += 2 {
			routed[l] = true
		}
	case PatternEveryNth:
		if p.Every < 1 || p.Offset < 0 || p.Offset >= nLayers {
			return nil, fmt.Errorf("pattern every_nth: Every = %d, Offset = %d with %d layers, want Every >= 1 and 0 <= Offset < %d", p.Every, p.Offset, nLayers, nLayers)
		}
		for l := p.Offset; l < nLayers; l += p.Every {
			routed[l] = true
		}
	case PatternDenseEnds:
		if p.DenseStart < 0 || p.DenseEnd < 0 || p.DenseStart+p.DenseEnd > nLayers {
			return nil, fmt.Errorf("pattern dense_ends: DenseStart = %d, DenseEnd = %d with %d layers, want both >= 0 and DenseStart + DenseEnd <= %d", p.DenseStart, p.DenseEnd, nLayers, nLayers)
		}
		for l := p.DenseStart; l < nLayers-p.DenseEnd; l++ {
			routed[l] = true
		}
	case PatternList:
		for _, l := range p.Layers {
			if l < 0 || l >= nLayers {
				return nil, fmt.Errorf("pattern list: layer %d, want 0 <= l < %d", l, nLayers)
			}
			if routed[l] {
				return nil, fmt.Errorf("pattern list: layer %d listed twice", l)
			}
			routed[l] = true
		}
	default:
		return nil, fmt.Errorf("pattern: Kind = %q, want all, every_other, every_nth, dense_ends or list", p.Kind)
	}
	return routed, nil
}

// ModelLayer is one layer of a model: a dense block, or a routed layer.
// Config.Block is the block shape in both cases; the routing fields are
// read only when Routed.
// In JSON it is {"routed": ..., "layer": ...}.
type ModelLayer struct {
	Routed bool   `json:"routed"`
	Config Config `json:"layer"`
}

// ModelConfig is a small MoD language model (docs/spec.md §10):
// embedding, the layers, a final norm and an LM head.
type ModelConfig struct {
	Vocab  int
	Layers []ModelLayer
	// MaxLen is the number of learned position embeddings (Block.Positions =
	// learned); sequences may not be longer. Unused with RoPE.
	MaxLen int
}

// NewModelConfig builds nLayers layers that share routing's block shape and
// routing choices, routed where pattern says. maxLen is the number of learned
// position embeddings (0 with RoPE). capacities, when non-nil, is the
// per-layer capacity list of docs/spec.md §3: one entry per routed layer,
// in layer order.
func NewModelConfig(vocab, maxLen, nLayers int, routing Config, pattern Pattern, capacities []Capacity) (ModelConfig, error) {
	routed, err := pattern.Routed(nLayers)
	if err != nil {
		return ModelConfig{}, err
	}
	nRouted := 0
	for _, r := range routed {
		if r {
			nRouted++
		}
	}
	if capacities != nil && len(capacities) != nRouted {
		return ModelConfig{}, fmt.Errorf("model: %d per-layer capacities for %d routed layers, want one per routed layer", len(capacities), nRouted)
	}
	cfg := ModelConfig{Vocab: vocab, MaxLen: maxLen}
	j := 0
	for l := 0; l < nLayers; l++ {
		c := routing
		if routed[l] && capacities != nil {
			c.Capacity = capacities[j]
			j++
		}
		cfg.Layers = append(cfg.Layers, ModelLayer{Routed: routed[l], Config: c})
	}
	return cfg, cfg.Validate()
}

// Validate reports the first invalid field of the model configuration (a
// *FieldError).
func (c ModelConfig) Validate() error {
	const m = "model"
	if c.Vocab < 2 {
		return invalid(m, "{Vocab|vocab} = %d, want >= 2", c.Vocab)
	}
	if err := checkMax(m, "Vocab", "vocab", c.Vocab, MaxVocab, "MaxVocab"); err != nil {
		return err
	}
	if len(c.Layers) == 0 {
		return invalid(m, "no {layers|layers}, want >= 1")
	}
	if err := checkMax(m, "layers", "layers", len(c.Layers), MaxLayers, "MaxLayers"); err != nil {
		return err
	}
	if c.MaxLen < 0 {
		return invalid(m, "{MaxLen|max_len} = %d, want >= 0", c.MaxLen)
	}
	if err := checkMax(m, "MaxLen", "max_len", c.MaxLen, MaxPositions, "MaxPositions"); err != nil {
		return err
	}
	if c.Layers[0].Config.Block.Positions == PositionLearned && c.MaxLen < 1 {
		return invalid(m, "{MaxLen|max_len} = %d with learned position embeddings, want the longest sequence length (>= 1)", c.MaxLen)
	}
	for l, ml := range c.Layers {
		if ml.Config.Block != c.Layers[0].Config.Block {
			key := blockDiff(ml.Config.Block, c.Layers[0].Config.Block)
			return invalid(m, "{layer %[1]d block %+[2]v|layers[%[1]d].layer.%[4]s} differs from {layer 0's %+[3]v|layers[0].layer.%[4]s}; layers share d and the norm", l, ml.Config.Block, c.Layers[0].Config.Block, key)
		}
		var err error
		if ml.Routed {
			err = ml.Config.Validate()
		} else {
			err = ml.Config.Block.Validate()
		}
		if err != nil {
			return err.(*FieldError).in(fmt.Sprintf("model: layer %d", l), fmt.Sprintf("layers[%d].layer.", l))
		}
	}
	return nil
}

// Block is the block shape shared by the model's layers.
func (c ModelConfig) Block() BlockConfig {
	return c.Layers[0].Config.Block
}
