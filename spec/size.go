package spec

// Size bounds of a configuration. Validate refuses a size above its bound
// before anything is allocated, so that a configuration from a file or a
// flag (a training config, a checkpoint, a corpus manifest) cannot ask for
// a matrix larger than memory or a loop longer than a life; each use then
// bounds the memory and time the sizes imply together (docs/training.md,
// docs/golden-format.md). They are far above the sizes modref runs (d = 64
// in training, d = 8 in the corpus) and above the widths of GPT-3 175B
// (d = 12288, d_ff = 49152, 96 layers; Brown et al., 2020), so that no real
// configuration meets them, and small enough that every product of sizes
// the code forms (layers·d·d_ff, vocab·d, ...) fits an int64.
const (
	// MaxD bounds the model width d: 2^14.
	MaxD = 1 << 14
	// MaxDFF bounds the MLP width d_ff and the predictor width h: 2^16.
	MaxDFF = 1 << 16
	// MaxLayers bounds the layers of a model: 2^10.
	MaxLayers = 1 << 10
	// MaxVocab bounds the vocabulary: 2^20.
	MaxVocab = 1 << 20
	// MaxPositions bounds ModelConfig.MaxLen, the learned position
	// embeddings: 2^20.
	MaxPositions = 1 << 20
	// MaxExperts bounds a MoDE layer's experts and its no-op experts,
	// each: 2^8.
	MaxExperts = 1 << 8
)

// checkMax returns a *FieldError naming the field (by Go name and JSON
// key), its value and its bound (the constant name) when v > limit.
func checkMax(what, field, key string, v, limit int, name string) error {
	if v > limit {
		return invalid(what, "{"+field+"|"+key+"} = %d exceeds the bound %d (spec.%s)", v, limit, name)
	}
	return nil
}

// ParamCount is the number of parameter values of the block: the norms'
// gains (and LayerNorm's biases), Wq and Wo (d×d), Wk and Wv (d×KVWidth),
// the biases of q, k and v with QKVBias (d + 2·KVWidth), and W1, W2 (and
// SwiGLU's W3). For a configuration Validate accepts; the sizes' bounds keep it
// from overflowing.
func (c BlockConfig) ParamCount() int64 {
	d, f := int64(c.D), int64(c.DFF)
	return c.normsAndAttention() + c.mlpCount(d, f)
}

// normsAndAttention counts N1, Wq, Wk, Wv, Wo and N2.
func (c BlockConfig) normsAndAttention() int64 {
	d := int64(c.D)
	norms := 2 * d
	if c.Norm == NormLayer {
		norms *= 2
	}
	attn := 2*d*d + 2*d*int64(c.KVWidth())
	if c.QKVBias {
		attn += d + 2*int64(c.KVWidth())
	}
	return norms + attn
}

// mlpCount counts one MLP of width f on d: W1, W2 and SwiGLU's W3.
func (c BlockConfig) mlpCount(d, f int64) int64 {
	if c.MLP == ActSwiGLU {
		return 3 * d * f
	}
	return 2 * d * f
}

// ParamCount is the number of parameter values of the routed layer: its
// block, its router (w, and b for linear_bias) and its predictor (h·d + h +
// h + 1) when it has one.
func (c Config) ParamCount() int64 {
	n := c.Block.ParamCount()
	d := int64(c.Block.D)
	switch c.Router {
	case RouterLinear:
		n += d
	case RouterLinearBias:
		n += d + 1
	}
	if c.HasPredictor() {
		h := int64(c.PredictorWidth())
		n += d*h + h + h + 1
	}
	return n
}

// ParamCount is the number of parameter values of the model: the token
// embeddings, the learned position embeddings (if any), every layer, the
// final norm and the LM head.
func (c ModelConfig) ParamCount() int64 {
	b := c.Block()
	d, v := int64(b.D), int64(c.Vocab)
	n := 2 * v * d // embeddings and head
	if b.Positions == PositionLearned {
		n += int64(c.MaxLen) * d
	}
	for _, ml := range c.Layers {
		if ml.Routed {
			n += ml.Config.ParamCount()
		} else {
			n += b.ParamCount()
		}
	}
	n += d
	if b.Norm == NormLayer {
		n += d
	}
	return n
}

// ParamCount is the number of parameter values of the MoDE layer: the norms
// and attention, the staged form's router, the gate and every expert's MLP.
func (c MoDEConfig) ParamCount() int64 {
	d, f := int64(c.Block.D), int64(c.Block.DFF)
	n := c.Block.normsAndAttention() + d*int64(c.GateWidth()) + int64(c.Experts)*c.Block.mlpCount(d, f)
	if c.Form == MoDEStaged {
		n += d
	}
	return n
}
