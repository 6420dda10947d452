package golden

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// isMoDEDeviation reports whether a deviation of docs/spec.md §11 is one of
// a Mixture-of-Depths-and-Experts layer (docs/spec.md §14), which only mode
// cases can show.
func isMoDEDeviation(name string) bool { return name == "mode_ungated_experts" }

// modeSpecOf is the generator's description of a mode case.
func modeSpecOf(c *Case) modeSpec {
	m := c.Manifest
	cfg := m.Config
	return modeSpec{name: m.Name, description: m.Description, catches: m.Catches,
		batch: cfg.Batch, seqLen: cfg.SeqLen, cfg: *cfg.MoDE}
}

// emulateMoDECase recomputes a mode case under each deviation it can show:
// the MoDE deviations; the others belong to routed layers and models.
func emulateMoDECase(c *Case, progress func(done, total int)) ([]emulation, error) {
	if c.Manifest.Config.MoDE == nil {
		return nil, fmt.Errorf("mode case without a MoDE configuration")
	}
	s := modeSpecOf(c)
	dr, err := modeDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	// ref checks the configuration, parameters and inputs once.
	if _, err := ref.MoDEForward(s.cfg, dr.p, dr.x); err != nil {
		return nil, err
	}
	var ems []emulation
	for _, dev := range Deviations {
		if isMoDEDeviation(dev.Name) {
			ems = append(ems, emulation{name: dev.Name})
		} else {
			ems = append(ems, notEmulated(dev.Name, "a mode case shows only the MoDE deviations; layer, model and decode cases test this one"))
		}
	}
	err = emulateEach(ems, progress, func(int) int { return 1 }, func(i int) (map[string]*Array, error) { return modeArrays(c, s, ems[i].name) })
	return ems, err
}

// ungatedForward is a MoDE layer (docs/spec.md §14) with the decision fz
// and the deviation mode_ungated_experts, built from ref's pieces: each
// expert that chose a token adds MLP_e(u) instead of G_e·MLP_e(u). Every
// other step is ref.MoDEForwardFrozen's.
func ungatedForward(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz ref.MoDEFrozen) ([]*mat.Dense, error) {
	var outs []*mat.Dense
	for b, xb := range x {
		pos := fz.Selection.Rows[b]
		out := mat.DenseCopyOf(xb)
		if len(pos) == 0 {
			outs = append(outs, out)
			continue
		}
		xs := mat.NewDense(len(pos), cfg.Block.D, nil)
		for t, i := range pos {
			xs.SetRow(t, xb.RawRowView(i))
		}
		a, err := ref.AttentionUpdate(cfg.Block, &p.Block, xs, pos)
		if err != nil {
			return nil, err
		}
		for t, i := range pos {
			h := make([]float64, cfg.Block.D)
			for j := range h {
				h[j] = xs.At(t, j) + a.At(t, j)
			}
			var u []float64
			if cfg.Block.Norm == spec.NormLayer {
				u = ref.LayerNorm(h, p.Block.Norm2, p.Block.Norm2Bias, cfg.Block.NormEps)
			} else {
				u = ref.RMSNorm(h, p.Block.Norm2, cfg.Block.NormEps)
			}
			m := make([]float64, cfg.Block.D)
			for e := range cfg.Experts {
				if !slices.Contains(fz.Experts[b][e], i) {
					continue
				}
				for j, y := range ref.MLP(cfg.Block, &p.Experts[e], u) {
					m[j] += y
				}
			}
			for j := range m {
				if cfg.Form == spec.MoDEStaged {
					r := ref.RouterLinearWeight(p.Router, xb.RawRowView(i))
					out.Set(i, j, xb.At(i, j)+float64(r*(a.At(t, j)+m[j])))
				} else {
					out.Set(i, j, xb.At(i, j)+a.At(t, j)+m[j])
				}
			}
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// modeArrays computes a mode case's expected arrays under the deviation
// name, as the generator does for the oracle (but for its analytic
// gradients, as layerArrays says): the decision (selection,
// gates, expert choice) is the oracle's, which the deviation leaves alone;
// the output, the loss and the gradients (central differences with the
// decision frozen) are the deviant layer's.
func modeArrays(c *Case, s modeSpec, name string) (map[string]*Array, error) {
	dr, err := modeDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	res, err := ref.MoDEForward(s.cfg, dr.p, dr.x)
	if err != nil {
		return nil, err
	}
	if name != "mode_ungated_experts" {
		return nil, fmt.Errorf("no MoDE emulation of %s", name)
	}
	forward := func() ([]*mat.Dense, error) { return ungatedForward(s.cfg, dr.p, dr.x, res.Frozen) }
	out, err := forward()
	if err != nil {
		return nil, err
	}
	arrays := map[string]*Array{
		"expected.out":           batchArray(out),
		"expected.gates":         gatesArray(res.Gates),
		"expected.expert_choice": expertChoiceArray(res.Experts),
	}
	if res.RouterWeights != nil {
		arrays["expected.router_logits"] = fieldArray(res.RouterWeights, nil)
		arrays["expected.selected"] = selectedArray(res.Selection)
	}
	loss := func() (float64, error) {
		o, err := forward()
		if err != nil {
			return 0, err
		}
		return dot(o, dr.u), nil
	}
	v, err := loss()
	if err != nil {
		return nil, err
	}
	arrays["expected.loss"] = Scalar(v)
	gx := make([]float64, 0, s.batch*s.seqLen*s.cfg.Block.D)
	for _, x := range dr.x {
		g, err := ref.FDGradient(loss, x.RawMatrix().Data, ref.FDStep)
		if err != nil {
			return nil, fmt.Errorf("gradient of input.x: %w", err)
		}
		gx = append(gx, g...)
	}
	arrays["grad.input.x"] = Float(gx, s.batch, s.seqLen, s.cfg.Block.D)
	for _, t := range dr.p.Tensors("") {
		g, err := gradient(loss, t.Data, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gradient of param.%s: %w", t.Name, err)
		}
		arrays["grad.param."+t.Name] = g
	}
	return arrays, nil
}
