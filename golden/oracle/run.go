package oracle

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
)

// RefCandidate recomputes a case with ref from the case's own inputs and
// parameters (not from the generator's seed) and returns the result as a
// candidate: the expected arrays under their candidate names. A sound corpus
// and ref give back the expected values exactly.
func RefCandidate(c *format.Case) (map[string]*format.Array, error) {
	re, err := Recompute(c)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	cand := make(map[string]*format.Array)
	for _, info := range re.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			cand[format.CandidateName(info.Name)] = re.Arrays[info.Name]
		}
	}
	return cand, nil
}

// Recompute runs the generator's computation on a case's inputs and
// parameters.
func Recompute(c *format.Case) (*format.Case, error) {
	m := c.Manifest
	valid := m.Config.ValidLengths
	switch m.Kind {
	case format.KindLayer:
		s, dr, res, err := layerOf(c)
		if err != nil {
			return nil, err
		}
		return LayerCase(s, m.Provenance.Seed, dr, res, LayerGaps(s.Config, res, valid))
	case format.KindModel, format.KindDecode:
		s, p, in, res, err := modelOf(c)
		if err != nil {
			return nil, err
		}
		var gaps [][]float64
		for l, lr := range res.Layers {
			if lr != nil {
				gaps = append(gaps, LayerGaps(s.Config.Layers[l].Config, lr, valid))
			}
		}
		return ModelCase(s, m.Provenance.Seed, p, in, res, gaps)
	case format.KindMoDE:
		s, dr, res, err := modeOf(c)
		if err != nil {
			return nil, err
		}
		return MoDECase(s, m.Provenance.Seed, dr, res, MoDEGaps(res))
	}
	return nil, fmt.Errorf("kind %q", m.Kind)
}

// layerOf returns a layer case's spec, its draw (read from the case) and
// ref's forward pass on it.
func layerOf(c *format.Case) (LayerSpec, LayerDraw, *ref.LayerResult, error) {
	s, dr, err := layerDraw(c)
	if err != nil {
		return s, dr, nil, err
	}
	res, err := ref.LayerForward(s.Config, dr.P, dr.In)
	return s, dr, res, err
}

// layerDraw returns a layer case's spec and its draw (read from the case:
// LayerDrawViewOf).
func layerDraw(c *format.Case) (LayerSpec, LayerDraw, error) {
	m := c.Manifest
	cfg := m.Config
	s := LayerSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: *cfg.Layer, Ties: m.Routing.Ties}
	dr, err := LayerDrawViewOf(c, s)
	return s, dr, err
}

// modelOf returns a model or decode case's spec, its parameters and inputs
// (read from the case) and ref's forward pass on them.
func modelOf(c *format.Case) (ModelSpec, *ref.ModelParams, ref.ModelInputs, *ref.ModelResult, error) {
	m := c.Manifest
	cfg := m.Config
	s := ModelSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: cfg.ModelConfig(), Decode: m.Kind == format.KindDecode}
	p, in, err := ModelDrawOf(c, s)
	if err != nil {
		return s, nil, in, nil, err
	}
	res, err := ref.ModelForward(s.Config, p, in)
	return s, p, in, res, err
}

// modeOf returns a MoDE case's spec, its draw (read from the case) and
// ref's forward pass on it.
func modeOf(c *format.Case) (MoDESpec, MoDEDraw, *ref.MoDEResult, error) {
	m := c.Manifest
	cfg := m.Config
	s := MoDESpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Config: *cfg.MoDE}
	dr, err := MoDEDrawOf(c, s)
	if err != nil {
		return s, dr, nil, err
	}
	res, err := ref.MoDEForward(s.Config, dr.P, dr.X)
	return s, dr, res, err
}

// Matrices splits a B×S×d array into B matrices of S×d (copies).
func Matrices(a *format.Array) []*mat.Dense {
	b, s, d := a.Shape[0], a.Shape[1], a.Shape[2]
	out := make([]*mat.Dense, b)
	for i := range out {
		out[i] = mat.NewDense(s, d, append([]float64(nil), a.F[i*s*d:(i+1)*s*d]...))
	}
	return out
}

// views splits a B×S×d array into one S×d matrix per batch row, each a
// view of a's values (no copy): for reading only.
func views(a *format.Array) []*mat.Dense {
	b, s, d := a.Shape[0], a.Shape[1], a.Shape[2]
	out := make([]*mat.Dense, b)
	for i := range out {
		out[i] = mat.NewDense(s, d, a.F[i*s*d:(i+1)*s*d:(i+1)*s*d])
	}
	return out
}

// Field splits a B×S array into rows (copies).
func Field(a *format.Array) [][]float64 {
	b, s := a.Shape[0], a.Shape[1]
	out := make([][]float64, b)
	for i := range out {
		out[i] = append([]float64(nil), a.F[i*s:(i+1)*s]...)
	}
	return out
}

// Ints splits a B×S integer array into rows.
func Ints(a *format.Array) [][]int {
	b, s := a.Shape[0], a.Shape[1]
	out := make([][]int, b)
	for i := range out {
		out[i] = make([]int, s)
		for j := range out[i] {
			out[i][j] = int(a.I[i*s+j])
		}
	}
	return out
}

// LoadParams copies the case's param.<prefix><Name> arrays into ts.
func LoadParams(c *format.Case, ts []ref.Tensor) error {
	for _, t := range ts {
		v, err := paramValues(c, t.Name, len(t.Data))
		if err != nil {
			return err
		}
		copy(t.Data, v)
	}
	return nil
}

// paramValues are the values of the case's param.<name>, which the
// configuration needs n of.
func paramValues(c *format.Case, name string, n int) ([]float64, error) {
	a, err := c.Array("param." + name)
	if err != nil {
		return nil, err
	}
	if len(a.F) != n {
		return nil, fmt.Errorf("array %q has %d values, the configuration needs %d", "param."+name, len(a.F), n)
	}
	return a.F, nil
}

// InputAndUpstream reads a layer-level case's input.x and upstream.out,
// one S×d matrix per batch row each (copies).
func InputAndUpstream(c *format.Case) (x, u []*mat.Dense, err error) {
	return inputAndUpstream(c, Matrices)
}

func inputAndUpstream(c *format.Case, split func(*format.Array) []*mat.Dense) (x, u []*mat.Dense, err error) {
	xa, err := c.Array("input.x")
	if err != nil {
		return nil, nil, err
	}
	ua, err := c.Array("upstream.out")
	if err != nil {
		return nil, nil, err
	}
	return split(xa), split(ua), nil
}

// LayerDrawOf is a layer case's draw: its parameters, inputs and upstream
// gradient, copied from the case.
func LayerDrawOf(c *format.Case, s LayerSpec) (LayerDraw, error) {
	var dr LayerDraw
	dr.P = ref.NewLayerParams(s.Config, nil)
	if err := LoadParams(c, dr.P.Tensors("")); err != nil {
		return dr, err
	}
	return layerInputsOf(c, s, dr, Matrices)
}

// LayerDrawViewOf is LayerDrawOf with the parameters, input.x and
// upstream.out as views of the case's values (no copy), for a
// recomputation that reads them only: at production shapes each copy is
// tens of MB per deviation emulated. Nothing may write to them (finite
// differences perturb their input: they take LayerDrawOf).
func LayerDrawViewOf(c *format.Case, s LayerSpec) (LayerDraw, error) {
	var dr LayerDraw
	var err error
	dr.P, err = ref.LayerParamsOver(s.Config, func(name string, n int) ([]float64, error) {
		return paramValues(c, name, n)
	})
	if err != nil {
		return dr, err
	}
	return layerInputsOf(c, s, dr, views)
}

// layerInputsOf is dr with the case's inputs and upstream gradient, the
// B×S×d ones split by split.
func layerInputsOf(c *format.Case, s LayerSpec, dr LayerDraw, split func(*format.Array) []*mat.Dense) (LayerDraw, error) {
	x, u, err := inputAndUpstream(c, split)
	if err != nil {
		return dr, err
	}
	dr.In = ref.LayerInputs{X: x, Valid: s.Valid}
	dr.U = u
	if a, ok := c.Arrays["input.noise"]; ok {
		dr.In.Noise = Field(a)
	}
	if a, ok := c.Arrays["input.jitter"]; ok {
		dr.In.Jitter = Field(a)
	}
	return dr, nil
}

// ModelDrawOf reads a model or decode case's parameters (into parameters
// of the configuration's shapes, not drawn: ref.ModelParamsShaped) and its
// inputs.
func ModelDrawOf(c *format.Case, s ModelSpec) (*ref.ModelParams, ref.ModelInputs, error) {
	p := ref.ModelParamsShaped(s.Config)
	if err := LoadParams(c, p.Tensors()); err != nil {
		return nil, ref.ModelInputs{}, err
	}
	tok, err := c.Array("input.tokens")
	if err != nil {
		return nil, ref.ModelInputs{}, err
	}
	tgt, err := c.Array("input.targets")
	if err != nil {
		return nil, ref.ModelInputs{}, err
	}
	in := ref.ModelInputs{Tokens: Ints(tok), Targets: Ints(tgt), Valid: s.Valid}
	for l := range s.Config.Layers {
		var noise, jitter [][]float64
		if a, ok := c.Arrays[fmt.Sprintf("input.noise.L%d", l)]; ok {
			noise = Field(a)
		}
		if a, ok := c.Arrays[fmt.Sprintf("input.jitter.L%d", l)]; ok {
			jitter = Field(a)
		}
		in.Noise = append(in.Noise, noise)
		in.Jitter = append(in.Jitter, jitter)
	}
	return p, in, nil
}
