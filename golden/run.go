package golden

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
	re, err := recompute(c)
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

// recompute runs the generator's computation on a case's inputs and
// parameters.
func recompute(c *format.Case) (*format.Case, error) {
	m := c.Manifest
	cfg := m.Config
	valid := cfg.ValidLengths
	switch m.Kind {
	case format.KindLayer:
		s := layerSpec{name: m.Name, description: m.Description, catches: m.Catches,
			batch: cfg.Batch, seqLen: cfg.SeqLen, valid: valid, cfg: *cfg.Layer, ties: m.Routing.Ties}
		dr, err := layerDrawOf(c, s)
		if err != nil {
			return nil, err
		}
		res, err := ref.LayerForward(s.cfg, dr.p, dr.in)
		if err != nil {
			return nil, err
		}
		return layerCase(s, m.Provenance.Seed, dr, res, layerGaps(s.cfg, res, valid))
	case format.KindModel, format.KindDecode:
		s := modelSpec{name: m.Name, description: m.Description, catches: m.Catches,
			batch: cfg.Batch, seqLen: cfg.SeqLen, valid: valid, cfg: cfg.ModelConfig(), decode: m.Kind == format.KindDecode}
		p, in, err := modelDrawOf(c, s)
		if err != nil {
			return nil, err
		}
		res, err := ref.ModelForward(s.cfg, p, in)
		if err != nil {
			return nil, err
		}
		var gaps [][]float64
		for l, lr := range res.Layers {
			if lr != nil {
				gaps = append(gaps, layerGaps(s.cfg.Layers[l].Config, lr, valid))
			}
		}
		return modelCase(s, m.Provenance.Seed, p, in, res, gaps)
	case format.KindMoDE:
		s := modeSpec{name: m.Name, description: m.Description, catches: m.Catches,
			batch: cfg.Batch, seqLen: cfg.SeqLen, cfg: *cfg.MoDE}
		dr, err := modeDrawOf(c, s)
		if err != nil {
			return nil, err
		}
		res, err := ref.MoDEForward(s.cfg, dr.p, dr.x)
		if err != nil {
			return nil, err
		}
		return modeCase(s, m.Provenance.Seed, dr, res, modeGaps(res))
	}
	return nil, fmt.Errorf("kind %q", m.Kind)
}

// matrices splits a B×S×d array into B matrices of S×d (copies).
func matrices(a *format.Array) []*mat.Dense {
	b, s, d := a.Shape[0], a.Shape[1], a.Shape[2]
	out := make([]*mat.Dense, b)
	for i := range out {
		out[i] = mat.NewDense(s, d, append([]float64(nil), a.F[i*s*d:(i+1)*s*d]...))
	}
	return out
}

// field splits a B×S array into rows (copies).
func field(a *format.Array) [][]float64 {
	b, s := a.Shape[0], a.Shape[1]
	out := make([][]float64, b)
	for i := range out {
		out[i] = append([]float64(nil), a.F[i*s:(i+1)*s]...)
	}
	return out
}

// ints splits a B×S integer array into rows.
func ints(a *format.Array) [][]int {
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

// loadParams copies the case's param.<prefix><Name> arrays into ts.
func loadParams(c *format.Case, ts []ref.Tensor) error {
	for _, t := range ts {
		a, err := c.Array("param." + t.Name)
		if err != nil {
			return err
		}
		if len(a.F) != len(t.Data) {
			return fmt.Errorf("array %q has %d values, the configuration needs %d", "param."+t.Name, len(a.F), len(t.Data))
		}
		copy(t.Data, a.F)
	}
	return nil
}

// inputAndUpstream reads a layer-level case's input.x and upstream.out,
// one S×d matrix per batch row each.
func inputAndUpstream(c *format.Case) (x, u []*mat.Dense, err error) {
	xa, err := c.Array("input.x")
	if err != nil {
		return nil, nil, err
	}
	ua, err := c.Array("upstream.out")
	if err != nil {
		return nil, nil, err
	}
	return matrices(xa), matrices(ua), nil
}

func layerDrawOf(c *format.Case, s layerSpec) (layerDraw, error) {
	var dr layerDraw
	dr.p = ref.NewLayerParams(s.cfg, ref.NewRand(0))
	if err := loadParams(c, dr.p.Tensors("")); err != nil {
		return dr, err
	}
	x, u, err := inputAndUpstream(c)
	if err != nil {
		return dr, err
	}
	dr.in = ref.LayerInputs{X: x, Valid: s.valid}
	dr.u = u
	if a, ok := c.Arrays["input.noise"]; ok {
		dr.in.Noise = field(a)
	}
	if a, ok := c.Arrays["input.jitter"]; ok {
		dr.in.Jitter = field(a)
	}
	return dr, nil
}

func modelDrawOf(c *format.Case, s modelSpec) (*ref.ModelParams, ref.ModelInputs, error) {
	p := ref.NewModelParams(s.cfg, 0)
	if err := loadParams(c, p.Tensors()); err != nil {
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
	in := ref.ModelInputs{Tokens: ints(tok), Targets: ints(tgt), Valid: s.valid}
	for l := range s.cfg.Layers {
		var noise, jitter [][]float64
		if a, ok := c.Arrays[fmt.Sprintf("input.noise.L%d", l)]; ok {
			noise = field(a)
		}
		if a, ok := c.Arrays[fmt.Sprintf("input.jitter.L%d", l)]; ok {
			jitter = field(a)
		}
		in.Noise = append(in.Noise, noise)
		in.Jitter = append(in.Jitter, jitter)
	}
	return p, in, nil
}
