package mod

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/spec"
)

// Model is a small Mixture-of-Depths language model (docs/spec.md §10):
// token embedding (plus learned absolute position embeddings when the block
// configuration asks for them), a stack of dense and routed layers, a final
// norm and a linear head, trained with next-token cross-entropy plus the
// routed layers' auxiliary losses.
type Model struct {
	// Embed is the vocab×d token embedding table.
	Embed *nn.Embedding
	// PosEmbed is the MaxLen×d table of learned position embeddings, nil
	// with rotary embeddings.
	PosEmbed *autograd.Tensor
	// Layers holds the routed layers, nil at the positions of dense layers.
	Layers []*Layer
	// Norm is the final norm and Head the d×vocab output map (no bias).
	Norm nn.Norm
	Head *nn.Linear

	cfg   spec.ModelConfig // checked by NewModel
	dense []*block         // the dense layers' blocks, nil at routed positions
}

// NewModel returns the model described by cfg, its parameters drawn from
// rand.New(rand.NewPCG(seed, 0)) in the order Params lists them (weights
// and embeddings N(0, nn.InitStd²), norm gains 1, biases 0), or an error
// naming the field of cfg that cannot work.
func NewModel(cfg spec.ModelConfig, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mod: %w", err)
	}
	blk := cfg.Block()
	rng := rand.New(rand.NewPCG(seed, 0))
	m := &Model{cfg: cfg, Embed: nn.NewEmbedding(cfg.Vocab, blk.D, rng)}
	if blk.Positions == spec.PositionLearned {
		m.PosEmbed = nn.NewEmbedding(cfg.MaxLen, blk.D, rng).W
	}
	m.Layers = make([]*Layer, len(cfg.Layers))
	m.dense = make([]*block, len(cfg.Layers))
	for l, ml := range cfg.Layers {
		var err error
		if ml.Routed {
			m.Layers[l], err = newLayer(ml.Config, rng)
		} else {
			m.dense[l], err = newBlock(blk, rng)
		}
		if err != nil {
			return nil, fmt.Errorf("mod: layer %d: %w", l, err)
		}
	}
	if blk.Norm == spec.NormLayer {
		m.Norm = nn.NewLayerNorm(blk.D)
	} else {
		m.Norm = nn.NewRMSNorm(blk.D)
	}
	setEps(m.Norm, blk.NormEps)
	m.Head = nn.NewLinear(blk.D, cfg.Vocab, false, rng)
	return m, nil
}

// Config returns the model's configuration, as given to NewModel (a
// routed layer's capacity may since have changed, see Layer.SetCapacity).
func (m *Model) Config() spec.ModelConfig { return m.cfg }

// Block returns layer l's transformer block, routed or dense.
func (m *Model) Block(l int) *nn.Block {
	if m.Layers[l] != nil {
		return m.Layers[l].Block()
	}
	return m.dense[l].Block
}

// Params returns every parameter with ref's names: Embed, PosEmbed, the
// layers' as "L<l>.<name>" (see Layer.Params), FinalNorm, FinalNormBias,
// Head, those that exist, in that order.
func (m *Model) Params() []Param {
	ps := []Param{{"Embed", m.Embed.W}}
	if m.PosEmbed != nil {
		ps = append(ps, Param{"PosEmbed", m.PosEmbed})
	}
	for l, rl := range m.Layers {
		prefix := fmt.Sprintf("L%d.", l)
		if rl != nil {
			ps = append(ps, rl.Params(prefix)...)
		} else {
			ps = append(ps, m.dense[l].named(prefix)...)
		}
	}
	switch n := m.Norm.(type) {
	case *nn.RMSNorm:
		ps = append(ps, Param{"FinalNorm", n.Gain})
	case *nn.LayerNorm:
		ps = append(ps, Param{"FinalNorm", n.Gain}, Param{"FinalNormBias", n.Bias})
	}
	return append(ps, Param{"Head", m.Head.W})
}

// ModelInputs are the data a model reads.
type ModelInputs struct {
	// Tokens holds B sequences of S token ids; Targets the id that should
	// follow each, or autograd.IgnoreIndex (−1) where there is none. Ids at
	// padded positions are not read.
	Tokens, Targets [][]int
	// Valid holds V_b per sequence; nil means every position is valid.
	Valid []int
	// Noise and Jitter hold, per layer, the B·S router noise and jitter eps
	// of that layer (see LayerInputs); nil where unused, or nil altogether.
	Noise, Jitter [][]float32
}

// ModelResult is what a model's forward computes. It lives on the tape, as
// everything in it does (the tensors, the slices, the layers' results):
// valid until the tape's Reset, after which the tape reuses its memory.
type ModelResult struct {
	// Logits are the (B·S)×vocab next-token logits.
	Logits *autograd.Tensor
	// Loss is CE + Aux as a 1×1 tensor, the value to differentiate.
	Loss *autograd.Tensor
	// CE is the mean cross-entropy over the valid positions with a target;
	// Aux is the sum of the routed layers' auxiliary losses.
	CE, Aux float64
	// Layers holds each routed layer's result, nil for dense layers.
	Layers []*LayerResult
	// FLOPs is the forward cost per layer and in total, against the dense
	// model.
	FLOPs ModelFLOPs
}

// check validates the inputs and returns the batch shape.
func (m *Model) check(in ModelInputs) (batch, error) {
	if len(in.Tokens) == 0 || len(in.Tokens[0]) == 0 {
		return batch{}, fmt.Errorf("Tokens is empty, want B >= 1 sequences of S >= 1 tokens")
	}
	bt, err := newBatch(len(in.Tokens), len(in.Tokens[0]), in.Valid)
	if err != nil {
		return bt, err
	}
	if m.PosEmbed != nil && bt.s > m.cfg.MaxLen {
		return bt, fmt.Errorf("sequence length S = %d exceeds MaxLen = %d learned position embeddings", bt.s, m.cfg.MaxLen)
	}
	if len(in.Targets) != bt.rows {
		return bt, fmt.Errorf("Targets has %d sequences, want B = %d", len(in.Targets), bt.rows)
	}
	for b := range bt.rows {
		if len(in.Tokens[b]) != bt.s || len(in.Targets[b]) != bt.s {
			return bt, fmt.Errorf("sequence %d has %d tokens and %d targets, want S = %d of each", b, len(in.Tokens[b]), len(in.Targets[b]), bt.s)
		}
		for i := range bt.validLen(b) {
			if id := in.Tokens[b][i]; id < 0 || id >= m.cfg.Vocab {
				return bt, fmt.Errorf("Tokens[%d][%d] = %d, want 0 <= id < vocab = %d", b, i, id, m.cfg.Vocab)
			}
			if id := in.Targets[b][i]; id != autograd.IgnoreIndex && (id < 0 || id >= m.cfg.Vocab) {
				return bt, fmt.Errorf("Targets[%d][%d] = %d, want 0 <= id < vocab = %d or -1", b, i, id, m.cfg.Vocab)
			}
		}
	}
	for _, f := range []struct {
		name string
		v    [][]float32
	}{{"Noise", in.Noise}, {"Jitter", in.Jitter}} {
		if f.v == nil {
			continue
		}
		if len(f.v) != len(m.Layers) {
			return bt, fmt.Errorf("%s has %d entries, want one per layer (%d; nil where unused)", f.name, len(f.v), len(m.Layers))
		}
		for l, v := range f.v {
			if m.Layers[l] == nil && v != nil {
				return bt, fmt.Errorf("%s[%d] is given but layer %d is dense; pass nil", f.name, l, l)
			}
		}
	}
	return bt, nil
}

// layerField returns entry l of a per-layer input, nil if there is none.
func layerField(v [][]float32, l int) []float32 {
	if v == nil {
		return nil
	}
	return v[l]
}

// Forward runs the model on a batch: embedding, every layer (a routed one
// with its own routing decision), final norm, head, cross-entropy, and the
// routed layers' auxiliary losses. Inputs that do not fit and routing errors
// (such as a NaN router weight) are errors naming the layer.
//
//	in.Tokens: [B, S] → Logits: [B·S, vocab]
func (m *Model) Forward(tp *autograd.Tape, in ModelInputs) (*ModelResult, error) {
	bt, err := m.check(in)
	if err != nil {
		return nil, fmt.Errorf("mod: model: %w", err)
	}
	padded := bt.padded()
	vpos := bt.validPositions(tp)
	vidx := bt.rowsOf(tp, vpos)
	x := m.embed(tp, in.Tokens, bt, padded, vpos, vidx)
	blk := m.cfg.Block()
	res := &autograd.Make[ModelResult](tp, 1)[0]
	res.Layers = autograd.Make[*LayerResult](tp, len(m.Layers))
	res.FLOPs.Layers = autograd.Make[LayerFLOPs](tp, len(m.Layers))
	aux := autograd.Make[*autograd.Tensor](tp, len(m.Layers))[:0]
	for l, rl := range m.Layers {
		if rl == nil {
			x = denseForward(tp, m.dense[l], x, padded, vidx, vpos)
			res.FLOPs.Layers[l] = denseFLOPs(blk, bt.lengths(tp))
			continue
		}
		lr, err := rl.forward(tp, LayerInputs{X: x, Batch: bt.rows, SeqLen: bt.s, Valid: in.Valid,
			Noise: layerField(in.Noise, l), Jitter: layerField(in.Jitter, l)})
		if err != nil {
			return nil, fmt.Errorf("mod: model layer %d: %w", l, err)
		}
		res.Layers[l] = lr
		res.FLOPs.Layers[l] = lr.FLOPs
		if lr.AuxLoss != nil {
			aux = append(aux, lr.AuxLoss)
		}
		x = lr.Out
	}
	res.Logits = m.Head.Forward(tp, m.Norm.Forward(tp, x))
	targets := autograd.Make[int](tp, bt.rows*bt.s)
	for k := range targets {
		targets[k] = autograd.IgnoreIndex
		if bt.isValid(k) {
			targets[k] = in.Targets[k/bt.s][k%bt.s]
		}
	}
	loss := tp.CrossEntropy(res.Logits, targets)
	res.CE = float64(loss.Data[0])
	for _, a := range aux {
		loss = tp.Add(loss, a)
		res.Aux += float64(a.Data[0])
	}
	res.Loss = loss
	m.totalFLOPs(&res.FLOPs, bt)
	return res, nil
}

// embed returns the input residual stream, (B·S)×d: Embed[token] plus
// PosEmbed[position] with learned positions at the valid positions, zero
// rows at padded ones.
//
//	tokens: [B, S] → [B·S, d]
func (m *Model) embed(tp *autograd.Tape, tokens [][]int, bt batch, padded bool, vpos [][]int, vidx []int) *autograd.Tensor {
	ids := autograd.Make[int](tp, len(vidx))[:0]
	for b, p := range vpos {
		for _, i := range p {
			ids = append(ids, tokens[b][i])
		}
	}
	x := m.Embed.Forward(tp, ids)
	if m.PosEmbed != nil {
		flat := autograd.Make[int](tp, len(vidx))[:0]
		for _, p := range vpos {
			flat = append(flat, p...)
		}
		x = tp.Add(x, tp.GatherRows(m.PosEmbed, flat))
	}
	if padded {
		x = tp.ScatterAddRows(tp.Zeros(bt.rows*bt.s, x.Cols), x, vidx)
	}
	return x
}

// denseForward is a dense layer: x + f(x) over the valid tokens, padded
// rows unchanged.
//
//	x: [B·S, d] → [B·S, d]
func denseForward(tp *autograd.Tape, blk *block, x *autograd.Tensor, padded bool, vidx []int, vpos [][]int) *autograd.Tensor {
	switch {
	case len(vidx) == 0:
		return x
	case padded:
		return tp.ScatterAddRows(x, blk.update(tp, tp.GatherRows(x, vidx), vpos), vidx)
	}
	return tp.Add(x, blk.update(tp, x, vpos))
}

// totalFLOPs adds the head and the totals to f.
func (m *Model) totalFLOPs(f *ModelFLOPs, bt batch) {
	f.Head = 2 * int64(bt.count()) * int64(m.cfg.Block().D) * int64(m.cfg.Vocab)
	f.Total, f.Dense = f.Head, f.Head
	for _, lf := range f.Layers {
		f.Total += lf.Total
		f.Dense += lf.DenseTwin
	}
	if f.Dense > 0 {
		f.Ratio = float64(f.Total) / float64(f.Dense)
	}
}
