package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
)

// InitStd is the standard deviation of the normal distribution that weight
// matrices and embedding tables are drawn from.
const InitStd = 0.02

// normalParam returns a rows×cols parameter drawn from N(0, InitStd²); a
// nil rng draws nothing and gives zeros.
func normalParam(rng *rand.Rand, rows, cols int) *autograd.Tensor {
	d := make([]float32, rows*cols)
	if rng == nil {
		return autograd.NewParam(rows, cols, d)
	}
	for i := range d {
		d[i] = float32(rng.NormFloat64() * InitStd)
	}
	return autograd.NewParam(rows, cols, d)
}

// constParam returns a 1×n parameter with every element v.
func constParam(n int, v float32) *autograd.Tensor {
	d := make([]float32, n)
	for i := range d {
		d[i] = v
	}
	return autograd.NewParam(1, n, d)
}

// Linear is the affine map y = x·W + b, applied to every row of x.
type Linear struct {
	// W is the d_in×d_out weight.
	W *autograd.Tensor
	// B is the 1×d_out bias, or nil for a map without bias.
	B *autograd.Tensor
}

// NewLinear returns an in→out Linear map with W drawn from N(0, InitStd²)
// (zeros for a nil rng) and a zero bias when bias is true. It panics if in
// or out is not positive.
func NewLinear(in, out int, bias bool, rng *rand.Rand) *Linear {
	if in <= 0 || out <= 0 {
		panic(fmt.Sprintf("nn.NewLinear: sizes %d→%d must be positive", in, out))
	}
	l := &Linear{W: normalParam(rng, in, out)}
	if bias {
		l.B = constParam(out, 0)
	}
	return l
}

// Forward returns x·W + b for an n×d_in x.
//
//	x: [N, d_in] → [N, d_out]
func (l *Linear) Forward(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	y := tp.MatMul(x, l.W)
	if l.B != nil {
		y = tp.Add(y, l.B)
	}
	return y
}

// Params returns W, then B if there is one.
func (l *Linear) Params() []*autograd.Tensor {
	if l.B == nil {
		return []*autograd.Tensor{l.W}
	}
	return []*autograd.Tensor{l.W, l.B}
}

// Embedding maps token ids to the rows of a vocab×d table.
type Embedding struct {
	// W is the vocab×d table; row t is token t's embedding.
	W *autograd.Tensor
}

// NewEmbedding returns a vocab×d table drawn from N(0, InitStd²). It panics if
// vocab or d is not positive.
func NewEmbedding(vocab, d int, rng *rand.Rand) *Embedding {
	if vocab <= 0 || d <= 0 {
		panic(fmt.Sprintf("nn.NewEmbedding: vocabulary %d and width %d must be positive", vocab, d))
	}
	return &Embedding{W: normalParam(rng, vocab, d)}
}

// Forward returns the len(ids)×d matrix whose row i is the embedding of
// ids[i]. The gradient goes to the rows of W that were looked up.
//
//	ids: [N] → [N, d]
func (e *Embedding) Forward(tp *autograd.Tape, ids []int) *autograd.Tensor {
	for i, id := range ids {
		if id < 0 || id >= e.W.Rows {
			panic(fmt.Sprintf("nn.Embedding.Forward: token id %d at index %d out of range for a vocabulary of %d", id, i, e.W.Rows))
		}
	}
	return tp.GatherRows(e.W, ids)
}

// Params returns W.
func (e *Embedding) Params() []*autograd.Tensor { return []*autograd.Tensor{e.W} }
