package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
)

// Layer is one layer of a language model's trunk: it maps the stacked rows x
// of the sequences described by pos to new rows of the same shape. Block is
// a Layer; a Mixture-of-Depths layer can be another.
type Layer interface {
	// Forward returns the layer's output for x.
	Forward(tp *autograd.Tape, x *autograd.Tensor, pos [][]int) *autograd.Tensor
	// Params returns the layer's parameters.
	Params() []*autograd.Tensor
}

// Config describes a language model: Layers blocks, all described by Block.
type Config struct {
	// Vocab is the number of token ids.
	Vocab int
	// Layers is the number of blocks L.
	Layers int
	// Block describes every block.
	Block BlockConfig
	// TieEmbeddings makes the head use the embedding table (logits = h·Eᵀ)
	// instead of its own weight.
	TieEmbeddings bool
}

// LM is a decoder-only language model: token embedding, a stack of layers,
// a final norm and a linear head, trained with next-token cross-entropy.
type LM struct {
	// Embed maps token ids to rows of width d.
	Embed *Embedding
	// Layers are applied in order; NewLM fills it with Blocks.
	Layers []Layer
	// Norm is the final normalisation, of the kind the blocks use.
	Norm Norm
	// Head is the d×vocab output weight (no bias), or nil when the
	// embeddings are tied.
	Head *Linear
}

// NewLM returns the language model described by cfg, its parameters drawn
// from rand.New(rand.NewPCG(seed, 0)) in the order Params lists them, or an
// error naming a field of cfg that cannot work.
func NewLM(cfg Config, seed uint64) (*LM, error) {
	switch {
	case cfg.Vocab <= 0:
		return nil, fmt.Errorf("nn: Config.Vocab is %d, must be positive", cfg.Vocab)
	case cfg.Layers < 0:
		return nil, fmt.Errorf("nn: Config.Layers is %d, must not be negative", cfg.Layers)
	}
	if err := cfg.Block.validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	m := &LM{Embed: NewEmbedding(cfg.Vocab, cfg.Block.D, rng)}
	for range cfg.Layers {
		b, err := NewBlock(cfg.Block, rng)
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, b)
	}
	m.Norm = newNorm(cfg.Block.Norm, cfg.Block.D)
	if !cfg.TieEmbeddings {
		m.Head = NewLinear(cfg.Block.D, cfg.Vocab, false, rng)
	}
	return m, nil
}

// Positions returns pos for a dense batch of batch sequences of seqLen
// tokens each: pos[b] = 0, 1, …, seqLen−1.
func Positions(batch, seqLen int) [][]int {
	pos := make([][]int, batch)
	for b := range pos {
		pos[b] = make([]int, seqLen)
		for i := range pos[b] {
			pos[b][i] = i
		}
	}
	return pos
}

// Logits returns the len(tokens)×vocab next-token logits of the stacked
// sequences tokens described by pos (see the package comment).
//
//	tokens: [N] → [N, vocab]
func (m *LM) Logits(tp *autograd.Tape, tokens []int, pos [][]int) *autograd.Tensor {
	x := m.Embed.Forward(tp, tokens)
	for _, l := range m.Layers {
		x = l.Forward(tp, x, pos)
	}
	x = m.Norm.Forward(tp, x)
	if m.Head == nil {
		return tp.MatMulNT(x, m.Embed.W)
	}
	return m.Head.Forward(tp, x)
}

// Loss returns the mean cross-entropy of the logits against targets, one per
// token: targets[i] is the token that should follow tokens[i], or
// autograd.IgnoreIndex for a token that has none (the end of a sequence,
// padding), which is left out of the mean.
//
//	tokens, targets: [N] → [1, 1]
func (m *LM) Loss(tp *autograd.Tape, tokens []int, pos [][]int, targets []int) *autograd.Tensor {
	return tp.CrossEntropy(m.Logits(tp, tokens, pos), targets)
}

// Params returns the embedding table, every layer's parameters in order,
// the final norm's and the head's.
func (m *LM) Params() []*autograd.Tensor {
	ps := m.Embed.Params()
	for _, l := range m.Layers {
		ps = append(ps, l.Params()...)
	}
	ps = append(ps, m.Norm.Params()...)
	if m.Head != nil {
		ps = append(ps, m.Head.Params()...)
	}
	return ps
}
