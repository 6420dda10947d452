package ref

import (
	"fmt"
	"math"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// arith is the arithmetic of a backward pass: the gradient itself
// (signed), or its magnitude, the same pass with every term taken as its
// absolute value, so that each element is the sum of the absolute values
// of everything that was added into it, through every step: |X|ᵀ|dY| for
// a weight, Σ_t |dY_t| for a bias, P(|dP| + Σ P|dP|) through a softmax.
// An element that is small by cancellation keeps the scale of what
// cancelled (docs/tolerances.md, "The scale of what cancelled").
type arith bool

const (
	signed    arith = false
	magnitude arith = true
)

// of is v, or |v| for the magnitude.
func (a arith) of(v float64) float64 {
	if a == magnitude {
		return math.Abs(v)
	}
	return v
}

// rows is x, or a copy of x with every value's absolute value for the
// magnitude.
func (a arith) rows(x []float64) []float64 {
	if a == signed || x == nil {
		return x
	}
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = math.Abs(v)
	}
	return out
}

// vec is rows for a parameter vector.
func (a arith) vec(x []float64) []float64 { return a.rows(x) }

// dense is w, or a copy with every element's absolute value for the
// magnitude.
func (a arith) dense(w *mat.Dense) *mat.Dense {
	if a == signed || w == nil {
		return w
	}
	r, c := w.Dims()
	out := mat.NewDense(r, c, nil)
	for i := 0; i < r; i++ {
		row, o := w.RawRowView(i), out.RawRowView(i)
		for j, v := range row {
			o[j] = math.Abs(v)
		}
	}
	return out
}

// sub is x − y, or |x| + |y| for the magnitude.
func (a arith) sub(x, y float64) float64 {
	if a == magnitude {
		return math.Abs(x) + math.Abs(y)
	}
	return x - y
}

// mats is a batch of matrices, or copies with absolute values.
func (a arith) mats(ms []*mat.Dense) []*mat.Dense {
	if a == signed {
		return ms
	}
	out := make([]*mat.Dense, len(ms))
	for b, m := range ms {
		out[b] = a.dense(m)
	}
	return out
}

// LayerGradientMagnitudes is LayerGradients in the magnitude arithmetic:
// for every gradient element, the sum of the absolute values of the terms
// the backward pass adds into it, each term's factors (activations,
// parameters, the magnitudes of the gradients it is computed from) taken
// as absolute values, the upstream gradient's too. It bounds the element
// (|g| ≤ its magnitude, by the triangle inequality, step by step), equals
// |g| where nothing cancels, and keeps the scale of what cancelled where
// something did: an implementation that rounds each term by a relative u
// errs on the element by about u times its magnitude per step.
func LayerGradientMagnitudes(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen, upstream []*mat.Dense) (*LayerGrads, error) {
	res, err := layerFrozen(cfg, p, in, fz, true)
	if err != nil {
		return nil, err
	}
	if err := checkUpstream(cfg, in, upstream); err != nil {
		return nil, err
	}
	u := magnitude.mats(upstream)
	return layerBackward(cfg, magnitude, p, in, res, upstreamParts(magnitude, res, u)), nil
}

// ModelGradientMagnitudes is ModelGradients in the magnitude arithmetic
// (LayerGradientMagnitudes): the cross-entropy's dz = (softmax − onehot)/N
// has the magnitude (softmax + onehot)/N.
func ModelGradientMagnitudes(c spec.ModelConfig, p *ModelParams, in ModelInputs, fz ModelFrozen) (*ModelParams, error) {
	if len(fz.Layers) != len(c.Layers) {
		return nil, fmt.Errorf("model: frozen decisions for %d layers, want %d", len(fz.Layers), len(c.Layers))
	}
	res, err := modelForward(c, p, in, &fz, nil, true)
	if err != nil {
		return nil, err
	}
	return modelBackward(c, magnitude, p, in, res)
}

// MoDEGradientMagnitudes is MoDEGradients in the magnitude arithmetic
// (LayerGradientMagnitudes).
func MoDEGradientMagnitudes(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, fz MoDEFrozen, upstream []*mat.Dense) (*MoDEGrads, error) {
	res, err := MoDEForwardFrozen(cfg, p, x, fz)
	if err != nil {
		return nil, err
	}
	return modeBackward(cfg, magnitude, p, x, res, upstream)
}
