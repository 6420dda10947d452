package nn

import (
	"fmt"

	"github.com/modref/modref/autograd"
)

// NormKind names a normalisation, as a configuration spells it.
type NormKind string

// The normalisations. The empty NormKind means NormRMS.
const (
	NormRMS   NormKind = "rmsnorm"
	NormLayer NormKind = "layernorm"
)

// Norm is a normalisation applied to each row (token) on its own: RMSNorm or
// LayerNorm.
type Norm interface {
	// Forward returns the normalised rows of x.
	Forward(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor
	// Params returns the norm's parameters.
	Params() []*autograd.Tensor
}

// newNorm returns a norm of the given kind over rows of width d.
func newNorm(kind NormKind, d int) Norm {
	if kind == NormLayer {
		return NewLayerNorm(d)
	}
	return NewRMSNorm(d)
}

// RMSNorm is root-mean-square normalisation:
// y = x / sqrt(mean_j x_j² + Eps) ⊙ Gain, for each row x.
type RMSNorm struct {
	// Gain is the 1×d gain γ.
	Gain *autograd.Tensor
	// Eps is added to the mean square; NewRMSNorm sets it to 1e-6. It is
	// applied in float32.
	Eps float64
}

// NewRMSNorm returns an RMSNorm over rows of width d with unit gain and
// Eps = 1e-6. It panics if d is not positive.
func NewRMSNorm(d int) *RMSNorm {
	if d <= 0 {
		panic(fmt.Sprintf("nn.NewRMSNorm: width %d must be positive", d))
	}
	return &RMSNorm{Gain: constParam(d, 1), Eps: 1e-6}
}

// Forward returns the RMS-normalised rows of x.
//
//	x: [N, d] → [N, d]
//
// It is autograd's fused RMSNorm, which has the bits of the chain
// x ⊙ rsqrt(mean(x⊙x) + Eps) ⊙ Gain in float32 operations.
func (n *RMSNorm) Forward(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	return tp.RMSNorm(x, n.Gain, float32(n.Eps))
}

// Params returns Gain.
func (n *RMSNorm) Params() []*autograd.Tensor { return []*autograd.Tensor{n.Gain} }

// LayerNorm is layer normalisation:
// y = (x − μ) / sqrt(σ² + Eps) ⊙ Gain + Bias, for each row x with mean μ and
// biased variance σ² = mean_j (x_j − μ)².
type LayerNorm struct {
	// Gain is the 1×d gain γ and Bias the 1×d shift β.
	Gain, Bias *autograd.Tensor
	// Eps is added to the variance; NewLayerNorm sets it to 1e-5. The
	// standardisation (autograd's Standardize) runs in float64, so that a
	// row whose features are nearly equal keeps its accuracy.
	Eps float64
}

// NewLayerNorm returns a LayerNorm over rows of width d with unit gain, zero
// bias and Eps = 1e-5. It panics if d is not positive.
func NewLayerNorm(d int) *LayerNorm {
	if d <= 0 {
		panic(fmt.Sprintf("nn.NewLayerNorm: width %d must be positive", d))
	}
	return &LayerNorm{Gain: constParam(d, 1), Bias: constParam(d, 0), Eps: 1e-5}
}

// Forward returns the layer-normalised rows of x.
//
//	x: [N, d] → [N, d]
func (n *LayerNorm) Forward(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	return tp.NormAffine(tp.Standardize(x, n.Eps), n.Gain, n.Bias)
}

// Params returns Gain, then Bias.
func (n *LayerNorm) Params() []*autograd.Tensor { return []*autograd.Tensor{n.Gain, n.Bias} }
