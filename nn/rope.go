package nn

import (
	"fmt"
	"github.com/modref/modref/internal/elem"

	"github.com/modref/modref/autograd"
)

// RoPE applies rotary position embeddings to vectors of width Dim, one head
// at a time, from explicit positions.
//
// Pairing is rotate-half, as in GPT-NeoX and Llama: with h = Dim/2, element j
// pairs with element j+h for j < h, and the pair at position p turns by the
// angle θ_j = p · Base^(−2j/Dim):
//
//	y_j   = x_j cos θ_j − x_{j+h} sin θ_j
//	y_j+h = x_{j+h} cos θ_j + x_j sin θ_j
//
// The angles and their sines and cosines are computed in float64 and rounded
// once to float32, unless Float32Angles is set.
type RoPE struct {
	// Dim is the (even) width of a head, d_h.
	Dim int
	// Base is the frequency base, 10000 by default.
	Base float64
	// Float32Angles computes the angles as an implementation that works in
	// float32 does (PyTorch code and Hugging Face's Llama compute
	// inv_freq and position · inv_freq in float32): the frequency
	// Base^(−2j/Dim) rounded to float32, the angle θ_j rounded to float32
	// after the product float32(p) · frequency, and the sine and cosine of
	// that rounded angle, rounded to float32. The angle then errs by up to
	// about p · 2⁻²³ radians (1.2e-4 at p = 2047), at thousands of
	// positions the largest rounding error such an implementation makes
	// (docs/tolerances.md, "Precision profiles"). The precision profiles'
	// emulated implementations set it (mod/modcase.Emulate).
	Float32Angles bool

	// cos and sin are constant tables with a row per position p, holding
	// [cos θ_0 … cos θ_{h−1}, cos θ_0 … cos θ_{h−1}] and
	// [−sin θ_0 … −sin θ_{h−1}, sin θ_0 … sin θ_{h−1}]; they grow to the
	// largest position seen and are never written once built.
	cos, sin *autograd.Tensor
	base     float64 // the Base the tables were built for
	f32      bool    // the Float32Angles they were built for
}

// NewRoPE returns rotary embeddings for heads of width dim with base 10000.
// It panics if dim is not positive and even.
func NewRoPE(dim int) *RoPE {
	if dim <= 0 || dim%2 != 0 {
		panic(fmt.Sprintf("nn.NewRoPE: head width %d must be positive and even", dim))
	}
	return &RoPE{Dim: dim, Base: 10000}
}

// Apply rotates x, a (h·n)×Dim matrix holding h heads of n tokens each in the
// layout of autograd's SplitHeads (head 0's n rows, then head 1's, …), where
// pos[i] is the position of token i. pos may be any list of non-negative
// positions.
//
//	x: [h·n, Dim], pos: [n] → [h·n, Dim]
func (r *RoPE) Apply(tp *autograd.Tape, x *autograd.Tensor, pos []int) *autograd.Tensor {
	n, dh := len(pos), r.Dim
	if n == 0 || x.Cols != dh || x.Rows%n != 0 {
		panic(fmt.Sprintf("nn.RoPE.Apply: x is %dx%d, %d positions: want (h·%d)x%d", x.Rows, x.Cols, n, n, dh))
	}
	r.tables(pos)
	return tp.RotateHalf(x, r.cos, r.sin, pos)
}

// tables makes sure the tables cover every position in pos, rebuilding them
// (in new memory, so that operations recorded earlier stay valid) when a
// position is beyond them or Base has changed.
func (r *RoPE) tables(pos []int) {
	top := -1
	for i, p := range pos {
		if p < 0 {
			panic(fmt.Sprintf("nn.RoPE.Apply: position %d at index %d is negative", p, i))
		}
		top = max(top, p)
	}
	if r.cos != nil && top < r.cos.Rows && r.base == r.Base && r.f32 == r.Float32Angles {
		return
	}
	rows := top + 1
	if r.cos != nil {
		rows = max(rows, 2*r.cos.Rows)
	}
	dh, half := r.Dim, r.Dim/2
	c, s := make([]float32, rows*dh), make([]float32, rows*dh)
	// The elementary functions are internal/elem's, which give the same
	// bits on every machine (math.Pow and math.Sincos do not: docs/design.md).
	freq := make([]float64, half)
	for j := range freq {
		freq[j] = elem.Pow(r.Base, -2*float64(j)/float64(dh))
	}
	for p := 0; p < rows; p++ {
		for j := 0; j < half; j++ {
			theta := float64(p) * freq[j]
			if r.Float32Angles {
				// float32 · float32 is exact in float64: one rounding,
				// that of a float32 multiplication.
				theta = float64(float32(float64(p) * float64(float32(freq[j]))))
			}
			sin, cos := elem.Sin(theta), elem.Cos(theta)
			c[p*dh+j], c[p*dh+half+j] = float32(cos), float32(cos)
			s[p*dh+j], s[p*dh+half+j] = float32(-sin), float32(sin)
		}
	}
	r.cos, r.sin, r.base, r.f32 = autograd.New(rows, dh, c), autograd.New(rows, dh, s), r.Base, r.Float32Angles
}
