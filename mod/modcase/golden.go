// Package modcase runs mod, the float32 fast path, on the golden corpus and
// on ref's configurations: it builds a mod layer or model from a corpus case
// or from ref's parameters, and computes a case's candidate arrays. It is the
// one adapter between mod and the packages above it (golden, ref), used by
// `modref check`, mod's corpus test and the fuzz targets; mod itself imports
// neither (docs/design.md, "Dependencies").
package modcase

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/mod"
)

// LayerFromCase builds the routed layer of a golden layer case
// (docs/golden-format.md) with the case's parameters, rounded to float32,
// and its inputs. X is a parameter, so that a backward pass fills its
// gradient (the case's grad.input.x).
func LayerFromCase(c *format.Case) (*mod.Layer, mod.LayerInputs, error) {
	m := c.Manifest
	if m.Kind != format.KindLayer || m.Config.Layer == nil {
		return nil, mod.LayerInputs{}, fmt.Errorf("mod: case %s is a %s case, want a layer case", m.Name, m.Kind)
	}
	cfg := *m.Config.Layer
	l, err := mod.NewLayer(cfg, nil) // zeros: the case's values are loaded next
	if err != nil {
		return nil, mod.LayerInputs{}, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	if err := mod.LoadParams(l.Params(""), caseParams(c)); err != nil {
		return nil, mod.LayerInputs{}, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	rows, s, d := m.Config.Batch, m.Config.SeqLen, cfg.Block.D
	in := mod.LayerInputs{Batch: rows, SeqLen: s}
	x, err := caseFloats(c, "input.x", rows*s*d)
	if err != nil {
		return nil, mod.LayerInputs{}, err
	}
	in.X = autograd.NewParam(rows*s, d, x)
	if in.Valid, err = caseValid(c, rows); err != nil {
		return nil, mod.LayerInputs{}, err
	}
	if in.Noise, err = optionalFloats(c, "input.noise", rows*s); err != nil {
		return nil, mod.LayerInputs{}, err
	}
	if in.Jitter, err = optionalFloats(c, "input.jitter", rows*s); err != nil {
		return nil, mod.LayerInputs{}, err
	}
	return l, in, nil
}

// MoDEFromCase builds the MoDE layer of a golden mode case (docs/spec.md
// §14) with the case's parameters, rounded to float32, and its input X as a
// parameter, so that a backward pass fills its gradient.
func MoDEFromCase(c *format.Case) (*mod.MoDE, *autograd.Tensor, error) {
	m := c.Manifest
	if m.Kind != format.KindMoDE || m.Config.MoDE == nil {
		return nil, nil, fmt.Errorf("mod: case %s is a %s case, want a mode case", m.Name, m.Kind)
	}
	cfg := *m.Config.MoDE
	l, err := mod.NewMoDE(cfg, rand.New(rand.NewPCG(0, 0)))
	if err != nil {
		return nil, nil, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	if err := mod.LoadParams(l.Params(""), caseParams(c)); err != nil {
		return nil, nil, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	rows, s, d := m.Config.Batch, m.Config.SeqLen, cfg.Block.D
	x, err := caseFloats(c, "input.x", rows*s*d)
	if err != nil {
		return nil, nil, err
	}
	return l, autograd.NewParam(rows*s, d, x), nil
}

// ModelFromCase builds the model of a golden model or decode case with the
// case's parameters, rounded to float32, and its inputs.
func ModelFromCase(c *format.Case) (*mod.Model, mod.ModelInputs, error) {
	m := c.Manifest
	if m.Kind != format.KindModel && m.Kind != format.KindDecode {
		return nil, mod.ModelInputs{}, fmt.Errorf("mod: case %s is a %s case, want a model or decode case", m.Name, m.Kind)
	}
	cfg := m.Config.ModelConfig()
	model, err := mod.NewModel(cfg, 0)
	if err != nil {
		return nil, mod.ModelInputs{}, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	if err := mod.LoadParams(model.Params(), caseParams(c)); err != nil {
		return nil, mod.ModelInputs{}, fmt.Errorf("mod: case %s: %w", m.Name, err)
	}
	rows, s := m.Config.Batch, m.Config.SeqLen
	var in mod.ModelInputs
	if in.Tokens, err = caseGrid(c, "input.tokens", rows, s); err != nil {
		return nil, mod.ModelInputs{}, err
	}
	if in.Targets, err = caseGrid(c, "input.targets", rows, s); err != nil {
		return nil, mod.ModelInputs{}, err
	}
	if in.Valid, err = caseValid(c, rows); err != nil {
		return nil, mod.ModelInputs{}, err
	}
	for l := range cfg.Layers {
		noise, err := optionalFloats(c, fmt.Sprintf("input.noise.L%d", l), rows*s)
		if err != nil {
			return nil, mod.ModelInputs{}, err
		}
		jitter, err := optionalFloats(c, fmt.Sprintf("input.jitter.L%d", l), rows*s)
		if err != nil {
			return nil, mod.ModelInputs{}, err
		}
		in.Noise, in.Jitter = append(in.Noise, noise), append(in.Jitter, jitter)
	}
	return model, in, nil
}

// caseParams returns the case's param.* arrays by parameter name.
func caseParams(c *format.Case) map[string][]float64 {
	ps := make(map[string][]float64)
	for name, a := range c.Arrays {
		if p, ok := strings.CutPrefix(name, "param."); ok {
			ps[p] = a.F
		}
	}
	return ps
}

// caseArray returns the named array, checking that it holds n values.
func caseArray(c *format.Case, name string, n int) (*format.Array, error) {
	a := c.Arrays[name]
	if a == nil {
		return nil, fmt.Errorf("mod: case %s has no array %s", c.Manifest.Name, name)
	}
	if a.Len() != n {
		return nil, fmt.Errorf("mod: case %s: %s has %d values, want %d", c.Manifest.Name, name, a.Len(), n)
	}
	return a, nil
}

// caseFloats returns a float array rounded to float32.
func caseFloats(c *format.Case, name string, n int) ([]float32, error) {
	a, err := caseArray(c, name, n)
	if err != nil {
		return nil, err
	}
	if a.IsInt() {
		return nil, fmt.Errorf("mod: case %s: %s holds integers, want floats", c.Manifest.Name, name)
	}
	out := make([]float32, n)
	for i, v := range a.F {
		out[i] = float32(v)
	}
	return out, nil
}

// optionalFloats is caseFloats for an array the case may not have (nil).
func optionalFloats(c *format.Case, name string, n int) ([]float32, error) {
	if c.Arrays[name] == nil {
		return nil, nil
	}
	return caseFloats(c, name, n)
}

// caseInts returns an integer array.
func caseInts(c *format.Case, name string, n int) ([]int, error) {
	a, err := caseArray(c, name, n)
	if err != nil {
		return nil, err
	}
	if !a.IsInt() {
		return nil, fmt.Errorf("mod: case %s: %s holds floats, want integers", c.Manifest.Name, name)
	}
	out := make([]int, n)
	for i, v := range a.I {
		out[i] = int(v)
	}
	return out, nil
}

// caseGrid returns a B×S integer array as rows.
func caseGrid(c *format.Case, name string, rows, s int) ([][]int, error) {
	flat, err := caseInts(c, name, rows*s)
	if err != nil {
		return nil, err
	}
	g := make([][]int, rows)
	for b := range g {
		g[b] = flat[b*s : (b+1)*s]
	}
	return g, nil
}

// caseValid returns input.valid.
func caseValid(c *format.Case, rows int) ([]int, error) {
	return caseInts(c, "input.valid", rows)
}
