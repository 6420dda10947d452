package ref

import (
	"fmt"
	"math"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// arith is the arithmetic of a backward pass: the gradient itself
// (signed), or the squares of its terms (squares): the same pass with
// every factor it multiplies by (an activation, a parameter, a constant)
// squared, every difference a sum, and the upstream gradient squared, so
// that each element is the sum of the squares of the terms that reach it
// along every path of the backward pass. Its square root is their
// root-sum-square, the scale of what an element adds up, which an element
// that is small by cancellation keeps (docs/tolerances.md, "The scale of
// what cancelled").
type arith bool

const (
	signed  arith = false
	squares arith = true
)

// sq returns a copy of x with every value squared.
func sq(x []float64) []float64 {
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = v * v
	}
	return out
}

// f is a factor v as the arithmetic multiplies by it: v, or v² under
// squares.
func (a arith) f(v float64) float64 {
	if a == squares {
		return v * v
	}
	return v
}

// rows is x, or a copy of x with every value squared under squares.
func (a arith) rows(x []float64) []float64 {
	if a != squares || x == nil {
		return x
	}
	return sq(x)
}

// inPlace squares x in place under squares.
func (a arith) inPlace(x []float64) {
	if a == squares {
		for j, v := range x {
			x[j] = v * v
		}
	}
}

// dense is w, or a copy with every element squared under squares.
func (a arith) dense(w *mat.Dense) *mat.Dense {
	if a != squares || w == nil {
		return w
	}
	r, c := w.Dims()
	out := mat.NewDense(r, c, nil)
	for i := 0; i < r; i++ {
		o := out.RawRowView(i)
		for j, v := range w.RawRowView(i) {
			o[j] = v * v
		}
	}
	return out
}

// weights is p as the arithmetic multiplies by it, which the block's
// backward passes take: p, or under squares a copy whose weight matrices
// are squared (its vectors, which the arithmetic squares where it uses
// them, shared), made once for all the rows that pass through the block.
func (a arith) weights(p *BlockParams) *BlockParams {
	if a != squares {
		return p
	}
	w := *p
	w.Wq, w.Wk, w.Wv, w.Wo = a.dense(p.Wq), a.dense(p.Wk), a.dense(p.Wv), a.dense(p.Wo)
	w.W1, w.W2, w.W3 = a.dense(p.W1), a.dense(p.W2), a.dense(p.W3)
	return &w
}

// sub is x − y, or x + y under squares (of terms, which add).
func (a arith) sub(x, y float64) float64 {
	if a == squares {
		return x + y
	}
	return x - y
}

// mats is a batch of matrices, or copies with every element squared
// under squares.
func (a arith) mats(ms []*mat.Dense) []*mat.Dense {
	if a != squares {
		return ms
	}
	out := make([]*mat.Dense, len(ms))
	for b, m := range ms {
		out[b] = a.dense(m)
	}
	return out
}

// acc2 is the term x·y of a parameter's gradient, x the gradient it is
// computed from and y a factor: x·y, or x·y² under squares.
func (a arith) acc2(x, y float64) float64 {
	if a == squares {
		return float64(x * y * y)
	}
	return float64(x * y)
}

// acc3 is the term x·y·z (acc2 with two factors).
func (a arith) acc3(x, y, z float64) float64 {
	if a == squares {
		return float64(x * (y * y) * (z * z))
	}
	return float64(x * y * z)
}

// addXtY is addXtY, the weight gradient xᵀ·dy, with x squared under
// squares.
func (a arith) addXtY(dw *mat.Dense, x, y []float64, n int) {
	if a == squares {
		x = sq(x)
	}
	addXtY(dw, x, y, n)
}

// rootAll replaces every value of the tensors ts and matrices ms, sums of
// squares, by its square root.
func rootAll(ts []Tensor, ms []*mat.Dense) {
	for _, t := range ts {
		for j, v := range t.Data {
			t.Data[j] = math.Sqrt(v)
		}
	}
	for _, m := range ms {
		r, _ := m.Dims()
		for i := 0; i < r; i++ {
			row := m.RawRowView(i)
			for j, v := range row {
				row[j] = math.Sqrt(v)
			}
		}
	}
}

// LayerGradientMagnitudes is LayerGradients in the squares arithmetic
// (arith), square-rooted: for every gradient element, the root-sum-square
// of the terms that reach it along every path of the backward pass, each
// a product of the upstream gradient and the factors it is multiplied by
// on the way. It equals |g| where a single term reaches the element, and
// where many do and they cancel it keeps their scale: an implementation
// that rounds each term by a relative u independently errs on the element
// by about u times the magnitude per step, a random walk.
func LayerGradientMagnitudes(cfg spec.Config, p *LayerParams, in LayerInputs, fz Frozen, upstream []*mat.Dense) (*LayerGrads, error) {
	res, err := layerFrozen(cfg, p, in, fz, true)
	if err != nil {
		return nil, err
	}
	return layerMagnitudes(cfg, p, in, res, upstream)
}

// layerMagnitudes is the squares arithmetic's backward pass from the kept
// forward res, square-rooted (LayerGradientMagnitudes).
func layerMagnitudes(cfg spec.Config, p *LayerParams, in LayerInputs, res *LayerResult, upstream []*mat.Dense) (*LayerGrads, error) {
	if err := checkUpstream(cfg, in, upstream); err != nil {
		return nil, err
	}
	g := layerBackward(cfg, squares, p, in, res, upstreamParts(squares, res, squares.mats(upstream)))
	rootAll(g.Params.Tensors(""), g.X)
	return g, nil
}

// LayerForwardGradientMagnitudes is LayerForward and then
// LayerGradientMagnitudes at the decision it made, with one forward pass
// instead of two (as LayerForwardGradients): the same magnitudes.
func LayerForwardGradientMagnitudes(cfg spec.Config, p *LayerParams, in LayerInputs, upstream []*mat.Dense) (*LayerGrads, error) {
	res, err := layerForward(cfg, p, in, true)
	if err != nil {
		return nil, err
	}
	return layerMagnitudes(cfg, p, in, res, upstream)
}

// ModelGradientMagnitudes is ModelGradients in the squares arithmetic,
// square-rooted (LayerGradientMagnitudes): the cross-entropy's
// dz = (softmax − onehot)/N has the terms softmax/N and onehot/N.
func ModelGradientMagnitudes(c spec.ModelConfig, p *ModelParams, in ModelInputs, fz ModelFrozen) (*ModelParams, error) {
	if len(fz.Layers) != len(c.Layers) {
		return nil, fmt.Errorf("model: frozen decisions for %d layers, want %d", len(fz.Layers), len(c.Layers))
	}
	res, err := modelForward(c, p, in, &fz, nil, true)
	if err != nil {
		return nil, err
	}
	g, err := modelBackward(c, squares, p, in, res)
	if err != nil {
		return nil, err
	}
	rootAll(g.Tensors(), nil)
	return g, nil
}

// MoDEGradientMagnitudes is MoDEGradients in the squares arithmetic,
// square-rooted (LayerGradientMagnitudes).
func MoDEGradientMagnitudes(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, fz MoDEFrozen, upstream []*mat.Dense) (*MoDEGrads, error) {
	res, err := MoDEForwardFrozen(cfg, p, x, fz)
	if err != nil {
		return nil, err
	}
	g, err := modeBackward(cfg, squares, p, x, res, upstream)
	if err != nil {
		return nil, err
	}
	rootAll(g.Params.Tensors(""), g.X)
	return g, nil
}
