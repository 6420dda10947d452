package mod

import (
	"fmt"

	"github.com/modref/modref/autograd"
)

// Param is a parameter with the name ref.LayerParams.Tensors and
// ref.ModelParams.Tensors give it, which the golden corpus uses too
// ("Wq", "L1.Router", "Embed", ...).
type Param struct {
	// Name is the parameter's name, with its layer prefix in a model.
	Name string
	// T is the tensor, whose shape may differ from ref's (a length-d vector
	// is 1×d or d×1 here) but whose values are in the same row-major order.
	T *autograd.Tensor
}

// Params returns the layer's parameters with their names, each prefixed by
// prefix, in ref's order: the block (Norm1, Norm1Bias, Wq, Wk, Wv, Wo,
// Norm2, Norm2Bias, W1, W2, W3, those that exist), Router, RouterBias,
// PredW1, PredB1, PredW2, PredB2.
func (l *Layer) Params(prefix string) []Param {
	ps := l.blk.named(prefix)
	add := func(name string, t *autograd.Tensor) {
		if t != nil {
			ps = append(ps, Param{prefix + name, t})
		}
	}
	add("Router", l.Router)
	add("RouterBias", l.RouterBias)
	if p := l.Predictor; p != nil {
		add("PredW1", p.In.W)
		add("PredB1", p.In.B)
		add("PredW2", p.Out.W)
		add("PredB2", p.Out.B)
	}
	return ps
}

// Tensors returns the tensors of ps, for an optimiser.
func Tensors(ps []Param) []*autograd.Tensor {
	ts := make([]*autograd.Tensor, len(ps))
	for i, p := range ps {
		ts[i] = p.T
	}
	return ts
}

// LoadParams sets every parameter of ps from values, keyed by name and in
// row-major order (float64 values are rounded to float32). A parameter
// missing from values, a value list of the wrong length, or a name in values
// that is not in ps is an error.
func LoadParams(ps []Param, values map[string][]float64) error {
	known := make(map[string]bool, len(ps))
	for _, p := range ps {
		known[p.Name] = true
		v, ok := values[p.Name]
		if !ok {
			return fmt.Errorf("mod: parameter %s (%dx%d) has no value", p.Name, p.T.Rows, p.T.Cols)
		}
		if len(v) != p.T.Len() {
			return fmt.Errorf("mod: parameter %s is %dx%d but %d values are given", p.Name, p.T.Rows, p.T.Cols, len(v))
		}
		for i, x := range v {
			p.T.Data[i] = float32(x)
		}
	}
	for name := range values {
		if !known[name] {
			return fmt.Errorf("mod: a value is given for %s, which this configuration has no parameter for", name)
		}
	}
	return nil
}
