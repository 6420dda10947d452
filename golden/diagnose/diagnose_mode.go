package diagnose

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// isMoDEDeviation reports whether a deviation of docs/spec.md §11 is one of
// a Mixture-of-Depths-and-Experts layer (docs/spec.md §14), which only mode
// cases can show.
func isMoDEDeviation(name string) bool { return name == "mode_ungated_experts" }

// modeSpecOf is the generator's description of a mode case.
func modeSpecOf(c *format.Case) oracle.MoDESpec {
	m := c.Manifest
	cfg := m.Config
	return oracle.MoDESpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Config: *cfg.MoDE}
}

// emulateMoDECase recomputes a mode case under each deviation it can show:
// the MoDE deviations; the others belong to routed layers and models.
func emulateMoDECase(c *format.Case, progress func(done, total int)) ([]emulation, error) {
	if c.Manifest.Config.MoDE == nil {
		return nil, fmt.Errorf("mode case without a MoDE configuration")
	}
	s := modeSpecOf(c)
	dr, err := oracle.MoDEDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	// ref checks the configuration, parameters and inputs once.
	if _, err := ref.MoDEForward(s.Config, dr.P, dr.X); err != nil {
		return nil, err
	}
	var ems []emulation
	for _, dev := range format.Deviations {
		if isMoDEDeviation(dev.Name) {
			ems = append(ems, emulation{name: dev.Name})
		} else {
			ems = append(ems, notEmulated(dev.Name, "a mode case shows only the MoDE deviations; layer, model and decode cases test this one"))
		}
	}
	err = emulateEach(c, ems, progress, func(int) int { return 1 }, func(i int) (map[string]*format.Array, error) { return modeArrays(c, s, ems[i].name) })
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
// name, as the generator does for the oracle: the decision (selection,
// gates, expert choice) is the oracle's, which the deviation leaves alone;
// the output, the loss and the gradients (with the decision frozen, by
// ungatedBackward) are the deviant layer's.
func modeArrays(c *format.Case, s oracle.MoDESpec, name string) (map[string]*format.Array, error) {
	if name != "mode_ungated_experts" {
		return nil, fmt.Errorf("no MoDE emulation of %s", name)
	}
	dr, res, out, err := ungatedCase(c, s)
	if err != nil {
		return nil, err
	}
	arrays := modeValueArrays(res, out, dr.U)
	g, gx, err := ungatedBackward(s.Config, dr.P, dr.X, res.Frozen, dr.U)
	if err != nil {
		return nil, err
	}
	arrays["grad.input.x"] = oracle.BatchArray(gx)
	for _, t := range g.Tensors("") {
		arrays["grad.param."+t.Name] = format.Float(t.Data, t.Shape...)
	}
	return arrays, nil
}

// ungatedCase draws mode case c and evaluates it under
// mode_ungated_experts at the oracle's decision: the draw, the oracle's
// result and the deviant output.
func ungatedCase(c *format.Case, s oracle.MoDESpec) (oracle.MoDEDraw, *ref.MoDEResult, []*mat.Dense, error) {
	dr, err := oracle.MoDEDrawOf(c, s)
	if err != nil {
		return dr, nil, nil, err
	}
	res, err := ref.MoDEForward(s.Config, dr.P, dr.X)
	if err != nil {
		return dr, nil, nil, err
	}
	out, err := ungatedForward(s.Config, dr.P, dr.X, res.Frozen)
	return dr, res, out, err
}

// modeValueArrays are a mode case's expected forward arrays and loss with
// the deviant output out and the oracle's decision (res), u the upstream
// gradient.
func modeValueArrays(res *ref.MoDEResult, out, u []*mat.Dense) map[string]*format.Array {
	arrays := map[string]*format.Array{
		"expected.out":           oracle.BatchArray(out),
		"expected.gates":         oracle.GatesArray(res.Gates),
		"expected.expert_choice": oracle.ExpertChoiceArray(res.Experts),
		"expected.loss":          format.Scalar(oracle.Dot(out, u)),
	}
	if res.RouterWeights != nil {
		arrays["expected.router_logits"] = oracle.FieldArray(res.RouterWeights, nil)
		arrays["expected.selected"] = oracle.SelectedArray(res.Selection)
	}
	return arrays
}

// ungatedBackward is the backward pass of ungatedForward: the gradients of
// Σ u·out with respect to the parameters (in the shapes of p) and to x, the
// decision fz frozen. For row b's computed tokens X~ (at positions pos):
//
//	a = Attn(N1(X~)), h = X~ + a, m_t = Σ_{e < E chose t} MLP_e(N2(h_t))
//	staged:     out_i = x_i + r_i (a_t + m_t),  r_i = w·x_i
//	integrated: out_i = x_i + a_t + m_t
//
// Each expert e is a ref.BlockPass of the block with e's MLP over X~, whose
// backward takes dL/dm_e = dy at the tokens e chose (0 elsewhere), with
// dy = r_i u_i (staged) or u_i; the first takes dL/da = dy as well. Their
// attention and N2 gradients add into the block's, their MLPs' into the
// experts', and dX~ is their sum; staged, dr_i = u_i·(a_t + m_t) adds
// dr_i x_i into the router and dr_i w into dx_i. The gate's router gets
// nothing: its gates multiply nothing.
func ungatedBackward(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz ref.MoDEFrozen, u []*mat.Dense) (*ref.MoDEParams, []*mat.Dense, error) {
	g := ref.NewMoDEParams(cfg, ref.NewRand(0))
	for _, t := range g.Tensors("") {
		clear(t.Data)
	}
	d := cfg.Block.D
	var gx []*mat.Dense
	for b, xb := range x {
		dx := mat.DenseCopyOf(u[b])
		gx = append(gx, dx)
		pos := fz.Selection.Rows[b]
		n := len(pos)
		if n == 0 {
			continue
		}
		xs := ref.GatherRows(xb, pos)
		at := ref.BlockAt{RoPE: pos, Window: pos}
		passes := make([]*ref.BlockPass, cfg.Experts)
		m := mat.NewDense(n, d, nil) // Σ_e over the experts that chose each token
		for e := range cfg.Experts {
			pe := expertBlock(&p.Block, &p.Experts[e])
			bp, err := ref.NewBlockPass(cfg.Block, pe, xs, at)
			if err != nil {
				return nil, nil, err
			}
			passes[e] = bp
			me := bp.MLP()
			for t, i := range pos {
				if slices.Contains(fz.Experts[b][e], i) {
					row := m.RawRowView(t)
					for j, v := range me.RawRowView(t) {
						row[j] += v
					}
				}
			}
		}
		a := passes[0].Attention()
		dy := mat.NewDense(n, d, nil)
		for t, i := range pos {
			ui, dyt := u[b].RawRowView(i), dy.RawRowView(t)
			if cfg.Form != spec.MoDEStaged {
				copy(dyt, ui)
				continue
			}
			xi := xb.RawRowView(i)
			r := ref.RouterLinearWeight(p.Router, xi)
			dr := 0.0
			for j := range dyt {
				dyt[j] = float64(r * ui[j])
				dr += float64(ui[j] * (a.At(t, j) + m.At(t, j)))
			}
			dxi := dx.RawRowView(i)
			for j := range xi {
				g.Router[j] += float64(dr * xi[j])
				dxi[j] += float64(dr * p.Router[j])
			}
		}
		zero := mat.NewDense(n, d, nil)
		for e, bp := range passes {
			dm := mat.NewDense(n, d, nil)
			for t, i := range pos {
				if slices.Contains(fz.Experts[b][e], i) {
					dm.SetRow(t, dy.RawRowView(t))
				}
			}
			da := zero
			if e == 0 {
				da = dy
			}
			dxs := bp.Backward(expertBlock(&g.Block, &g.Experts[e]), da, dm)
			for t, i := range pos {
				row := dx.RawRowView(i)
				for j, v := range dxs.RawRowView(t) {
					row[j] += v
				}
			}
		}
	}
	return g, gx, nil
}

// expertBlock is the block blk with expert e's MLP (blk's own fields
// shared, e's MLP weights in place of blk's).
func expertBlock(blk, e *ref.BlockParams) *ref.BlockParams {
	q := *blk
	q.W1, q.W2, q.W3 = e.W1, e.W2, e.W3
	return &q
}

// modeArraysFD is modeArrays with the gradients by central differences of
// ungatedForward: the test oracle of ungatedBackward
// (TestAnalyticDeviantGradientsAreTheFiniteDifferences).
func modeArraysFD(c *format.Case, s oracle.MoDESpec) (map[string]*format.Array, error) {
	dr, res, out, err := ungatedCase(c, s)
	if err != nil {
		return nil, err
	}
	arrays := modeValueArrays(res, out, dr.U)
	loss := func() (float64, error) {
		o, err := ungatedForward(s.Config, dr.P, dr.X, res.Frozen)
		if err != nil {
			return 0, err
		}
		return oracle.Dot(o, dr.U), nil
	}
	gx := make([]float64, 0, s.Batch*s.SeqLen*s.Config.Block.D)
	for _, x := range dr.X {
		g, err := ref.FDGradient(loss, x.RawMatrix().Data, ref.FDStep)
		if err != nil {
			return nil, fmt.Errorf("gradient of input.x: %w", err)
		}
		gx = append(gx, g...)
	}
	arrays["grad.input.x"] = format.Float(gx, s.Batch, s.SeqLen, s.Config.Block.D)
	for _, t := range dr.P.Tensors("") {
		g, err := oracle.Gradient(loss, t.Data, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gradient of param.%s: %w", t.Name, err)
		}
		arrays["grad.param."+t.Name] = g
	}
	return arrays, nil
}
