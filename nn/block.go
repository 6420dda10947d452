package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
)

// BlockConfig describes a pre-norm transformer block. The zero values of
// Norm, Act and RoPEBase select the defaults of docs/spec.md §5.
type BlockConfig struct {
	// D is the model width d and Heads the number of attention heads; d/Heads
	// must be a whole, even number (RoPE rotates pairs).
	D, Heads int
	// KVHeads is the number of key and value heads (grouped-query
	// attention); it divides Heads, and 0 means Heads.
	KVHeads int
	// DFF is the MLP's hidden width d_ff.
	DFF int
	// Norm is the normalisation, NormRMS (the default) or NormLayer.
	Norm NormKind
	// Act is the MLP activation, ActGELU (the default) or ActSwiGLU.
	Act Activation
	// Window, when positive, is the sliding attention window; 0 means none.
	Window int
	// RoPEBase is the rotary frequency base; 0 means 10000.
	RoPEBase float64
	// Bias adds biases to every projection of attention and MLP.
	Bias bool
	// QKVBias adds biases to the query, key and value projections only
	// (Qwen's blocks), zero at first as every bias.
	QKVBias bool
}

// validate returns an error naming the first field that cannot work.
func (c BlockConfig) validate() error {
	switch {
	case c.D <= 0:
		return fmt.Errorf("nn: BlockConfig.D is %d, must be positive", c.D)
	case c.Heads <= 0:
		return fmt.Errorf("nn: BlockConfig.Heads is %d, must be positive", c.Heads)
	case c.D%c.Heads != 0:
		return fmt.Errorf("nn: BlockConfig.Heads is %d, must divide D = %d", c.Heads, c.D)
	case (c.D/c.Heads)%2 != 0:
		return fmt.Errorf("nn: BlockConfig.Heads is %d, gives an odd head width %d; RoPE needs an even one", c.Heads, c.D/c.Heads)
	case c.KVHeads < 0 || (c.KVHeads > 0 && c.Heads%c.KVHeads != 0):
		return fmt.Errorf("nn: BlockConfig.KVHeads is %d, must be 0 (Heads) or divide Heads = %d", c.KVHeads, c.Heads)
	case c.DFF <= 0:
		return fmt.Errorf("nn: BlockConfig.DFF is %d, must be positive", c.DFF)
	case c.Norm != "" && c.Norm != NormRMS && c.Norm != NormLayer:
		return fmt.Errorf("nn: BlockConfig.Norm is %q, must be %q or %q", c.Norm, NormRMS, NormLayer)
	case c.Act != "" && c.Act != ActGELU && c.Act != ActSwiGLU:
		return fmt.Errorf("nn: BlockConfig.Act is %q, must be %q or %q", c.Act, ActGELU, ActSwiGLU)
	case c.Window < 0:
		return fmt.Errorf("nn: BlockConfig.Window is %d, must be 0 (no window) or positive", c.Window)
	case c.RoPEBase != 0 && (!(c.RoPEBase > 1) || math.IsInf(c.RoPEBase, 1)):
		return fmt.Errorf("nn: BlockConfig.RoPEBase is %v, must be 0 (10000) or a finite number greater than 1", c.RoPEBase)
	}
	return nil
}

// Block is the pre-norm transformer block of docs/spec.md §5:
//
//	H = X + Attn(N1(X))
//	Y = H + MLP(N2(H))
//
// Its update f(X) = Y − X = Attn(N1(X)) + MLP(N2(H)) is what a
// Mixture-of-Depths layer scales by the router weight and adds back.
type Block struct {
	// N1 normalises the attention's input and N2 the MLP's.
	N1, N2 Norm
	// Attn is the causal self-attention.
	Attn *Attention
	// MLP is the feed-forward network.
	MLP *MLP
}

// NewBlock returns a block described by cfg, drawing its weights from rng in
// the order Params lists them (zeros for a nil rng), or an error naming a
// field of cfg that cannot work.
func NewBlock(cfg BlockConfig, rng *rand.Rand) (*Block, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv := cfg.KVHeads
	if kv == 0 {
		kv = cfg.Heads
	}
	b := &Block{N1: newNorm(cfg.Norm, cfg.D), Attn: NewGroupedAttention(cfg.D, cfg.Heads, kv, cfg.Bias, rng)}
	if cfg.QKVBias {
		for _, l := range []*Linear{b.Attn.Wq, b.Attn.Wk, b.Attn.Wv} {
			if l.B == nil {
				l.B = constParam(l.W.Cols, 0)
			}
		}
	}
	b.Attn.Window = cfg.Window
	if cfg.RoPEBase != 0 {
		b.Attn.RoPE.Base = cfg.RoPEBase
	}
	b.N2 = newNorm(cfg.Norm, cfg.D)
	b.MLP = NewMLP(cfg.D, cfg.DFF, cfg.Act, cfg.Bias, rng)
	return b, nil
}

// Forward returns Y = X + f(X) for the stacked sequences x described by pos
// (see the package comment).
//
//	x: [N, d] → [N, d]
func (b *Block) Forward(tp *autograd.Tape, x *autograd.Tensor, pos [][]int) *autograd.Tensor {
	h := tp.Add(x, b.AttnUpdate(tp, x, pos))
	return tp.Add(h, b.MLPUpdate(tp, h))
}

// Update returns the block's update f(X) = Attn(N1(X)) + MLP(N2(H)) with
// H = X + Attn(N1(X)), without the outer residual: Forward is X + Update.
//
//	x: [N, d] → [N, d]
func (b *Block) Update(tp *autograd.Tape, x *autograd.Tensor, pos [][]int) *autograd.Tensor {
	a := b.AttnUpdate(tp, x, pos)
	return tp.Add(a, b.MLPUpdate(tp, tp.Add(x, a)))
}

// AttnUpdate returns the attention half's update Attn(N1(X)), without the
// residual.
//
//	x: [N, d] → [N, d]
func (b *Block) AttnUpdate(tp *autograd.Tape, x *autograd.Tensor, pos [][]int) *autograd.Tensor {
	return b.Attn.Forward(tp, b.N1.Forward(tp, x), pos)
}

// MLPUpdate returns the MLP half's update MLP(N2(H)) for the rows of h,
// without the residual. Each row is processed on its own, so h may be any
// subset of tokens (MLP-only routing).
//
//	h: [N, d] → [N, d]
func (b *Block) MLPUpdate(tp *autograd.Tape, h *autograd.Tensor) *autograd.Tensor {
	return b.MLP.Forward(tp, b.N2.Forward(tp, h))
}

// Params returns the parameters of N1, Attn, N2 and MLP, in that order.
func (b *Block) Params() []*autograd.Tensor {
	ps := append(b.N1.Params(), b.Attn.Params()...)
	ps = append(ps, b.N2.Params()...)
	return append(ps, b.MLP.Params()...)
}
