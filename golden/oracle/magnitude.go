package oracle

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
)

// GradientMagnitudes returns, under candidate names, the magnitude of each
// of a case's gradient arrays (ref.LayerGradientMagnitudes and its model
// and MoDE forms): for every element, the sum of the absolute values of
// what the backward pass added into it, at the case's own decisions. A
// decode case has no gradients and gets none.
func GradientMagnitudes(c *format.Case) (map[string]*format.Array, error) {
	out := map[string]*format.Array{}
	put := func(dx []*mat.Dense, params, grads []ref.Tensor) {
		if dx != nil {
			out[format.CandidateName("grad.input.x")] = BatchArray(dx)
		}
		for k, t := range grads {
			out[format.CandidateName("grad.param."+params[k].Name)] = format.Float(t.Data, t.Shape...)
		}
	}
	switch c.Manifest.Kind {
	case format.KindLayer:
		s, dr, err := layerDraw(c)
		if err != nil {
			return nil, err
		}
		g, err := ref.LayerForwardGradientMagnitudes(s.Config, dr.P, dr.In, dr.U)
		if err != nil {
			return nil, err
		}
		put(g.X, dr.P.Tensors(""), g.Params.Tensors(""))
	case format.KindModel:
		s, p, in, res, err := modelOf(c)
		if err != nil {
			return nil, err
		}
		g, err := ref.ModelGradientMagnitudes(s.Config, p, in, res.Frozen)
		if err != nil {
			return nil, err
		}
		put(nil, p.Tensors(), g.Tensors())
	case format.KindMoDE:
		s, dr, res, err := modeOf(c)
		if err != nil {
			return nil, err
		}
		g, err := ref.MoDEGradientMagnitudes(s.Config, dr.P, dr.X, res.Frozen, dr.U)
		if err != nil {
			return nil, err
		}
		put(g.X, dr.P.Tensors(""), g.Params.Tensors(""))
	case format.KindDecode:
	default:
		return nil, fmt.Errorf("case %s: kind %q", c.Manifest.Name, c.Manifest.Kind)
	}
	return out, nil
}
