package modcase

import (
	"math/rand/v2"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// LayerFromRef returns a mod layer with configuration cfg holding ref's
// parameters p, rounded to float32.
func LayerFromRef(cfg spec.Config, p *ref.LayerParams) (*mod.Layer, error) {
	l, err := mod.NewLayer(cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		return nil, err
	}
	if err := mod.LoadParams(l.Params(""), paramValues(p.Tensors(""))); err != nil {
		return nil, err
	}
	return l, nil
}

// ModelFromRef returns a mod model with configuration cfg holding ref's
// parameters p, rounded to float32.
func ModelFromRef(cfg spec.ModelConfig, p *ref.ModelParams) (*mod.Model, error) {
	m, err := mod.NewModel(cfg, 1)
	if err != nil {
		return nil, err
	}
	if err := mod.LoadParams(m.Params(), paramValues(p.Tensors())); err != nil {
		return nil, err
	}
	return m, nil
}

// LayerInputsFromRef returns ref's layer inputs as mod's, rounded to
// float32, with X a parameter so that a backward pass fills its gradient.
// in has at least one row.
func LayerInputsFromRef(in ref.LayerInputs) mod.LayerInputs {
	rows := len(in.X)
	s, d := in.X[0].Dims()
	x := make([]float32, 0, rows*s*d)
	for _, m := range in.X {
		x = append(x, rowMajor32(m)...)
	}
	return mod.LayerInputs{X: autograd.NewParam(rows*s, d, x), Batch: rows, SeqLen: s, Valid: in.Valid,
		Noise: field32(in.Noise), Jitter: field32(in.Jitter)}
}

// ModelInputsFromRef returns ref's model inputs as mod's, noise and jitter
// rounded to float32.
func ModelInputsFromRef(in ref.ModelInputs) mod.ModelInputs {
	mi := mod.ModelInputs{Tokens: in.Tokens, Targets: in.Targets, Valid: in.Valid}
	if in.Noise != nil {
		mi.Noise = make([][]float32, len(in.Noise))
		for l, v := range in.Noise {
			mi.Noise[l] = field32(v)
		}
	}
	if in.Jitter != nil {
		mi.Jitter = make([][]float32, len(in.Jitter))
		for l, v := range in.Jitter {
			mi.Jitter[l] = field32(v)
		}
	}
	return mi
}

// paramValues returns ref's parameters by name.
func paramValues(ts []ref.Tensor) map[string][]float64 {
	m := make(map[string][]float64, len(ts))
	for _, t := range ts {
		m[t.Name] = t.Data
	}
	return m
}

// rowMajor32 returns m's values row by row, rounded to float32.
func rowMajor32(m *mat.Dense) []float32 {
	r, c := m.Dims()
	out := make([]float32, 0, r*c)
	for i := range r {
		out = append(out, to32(m.RawRowView(i)[:c])...)
	}
	return out
}

// field32 stacks a B×S field into B·S float32 values (nil stays nil).
func field32(f [][]float64) []float32 {
	if f == nil {
		return nil
	}
	var v []float32
	for _, row := range f {
		v = append(v, to32(row)...)
	}
	return v
}

// FrozenFromRef returns ref's frozen routing decision and stop-gradient
// constants as mod's, the constants rounded to float32: the selection, the
// targets' top-k, the straight-through offsets (nil stays nil) and the
// predictor's input (nil stays nil), B·S and (B·S)×d row-major.
func FrozenFromRef(fz ref.Frozen) mod.Frozen {
	out := mod.Frozen{Selected: fz.Selection.Rows, TopK: fz.TopK.Rows, STEOffset: field32(fz.STEOffset)}
	for _, m := range fz.PredictorInput {
		out.PredictorInput = append(out.PredictorInput, rowMajor32(m)...)
	}
	return out
}
