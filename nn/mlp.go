package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
)

// Activation names the MLP's nonlinearity, as a configuration spells it.
type Activation string

// The MLP activations. The empty Activation means ActGELU.
const (
	// ActGELU is W2·GELU(x·W1), GELU in its erf form x·Φ(x).
	ActGELU Activation = "gelu"
	// ActSwiGLU is W2·(SiLU(x·W1) ⊙ x·W3).
	ActSwiGLU Activation = "swiglu"
)

// MLP is the position-wise feed-forward network of a block, applied to every
// row of its input: y = act(x·W1)·W2 for GELU, y = (SiLU(x·W1) ⊙ x·W3)·W2
// for SwiGLU (biases added after each product when present).
type MLP struct {
	// W1 is d→d_ff, W2 is d_ff→d, and W3, for SwiGLU only (nil otherwise),
	// is the d→d_ff gate's partner.
	W1, W2, W3 *Linear
	// Act is ActGELU or ActSwiGLU.
	Act Activation
}

// NewMLP returns an MLP d→dff→d with the given activation (the empty one
// means ActGELU), weights drawn from N(0, InitStd²) in the order W1, W2, W3,
// and zero biases if bias is set. It panics on sizes that are not positive or
// an unknown activation.
func NewMLP(d, dff int, act Activation, bias bool, rng *rand.Rand) *MLP {
	if act == "" {
		act = ActGELU
	}
	if d <= 0 || dff <= 0 || (act != ActGELU && act != ActSwiGLU) {
		panic(fmt.Sprintf("nn.NewMLP: width %d, hidden width %d, activation %q: want positive sizes and %q or %q",
			d, dff, act, ActGELU, ActSwiGLU))
	}
	m := &MLP{W1: NewLinear(d, dff, bias, rng), W2: NewLinear(dff, d, bias, rng), Act: act}
	if act == ActSwiGLU {
		m.W3 = NewLinear(d, dff, bias, rng)
	}
	return m
}

// Forward returns the MLP applied to each row of x.
//
//	x: [N, d] → [N, d_ff] → [N, d]
func (m *MLP) Forward(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	h := m.W1.Forward(tp, x)
	if m.Act == ActSwiGLU {
		h = tp.Mul(tp.SiLU(h), m.W3.Forward(tp, x))
	} else {
		h = tp.GELU(h)
	}
	return m.W2.Forward(tp, h)
}

// Params returns W1's, W2's and then W3's parameters.
func (m *MLP) Params() []*autograd.Tensor {
	ps := append(m.W1.Params(), m.W2.Params()...)
	if m.W3 != nil {
		ps = append(ps, m.W3.Params()...)
	}
	return ps
}
