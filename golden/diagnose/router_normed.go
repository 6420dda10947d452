package diagnose

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// router_normed_input: the router reads the block's normed input N1(x)
// instead of the residual stream x (docs/spec.md §2): r = w·N1(x) (+ b),
// N1 with the block's own gain (and bias), as γ-MoD's layer calls its
// router on input_layernorm(hidden_states). It sets routerNormed: decide
// routes by those router weights, and run reports them and weights the
// update by them (normedRouter). It applies where skipRouterNormed finds
// no reason against it. Its backward pass (pass) takes the router's
// gradient at N1(x) (ref.LayerPartGrads.RouterInput) and carries it back
// through N1 (normedInputBackward).
var devRouterNormed = layerDeviation{name: "router_normed_input", skip: skipRouterNormed, routerNormed: true}

// skipRouterNormed says why router_normed_input does not apply to a routed
// layer of configuration cfg, or returns "".
func skipRouterNormed(cfg spec.Config) string {
	if cfg.Router != spec.RouterLinear && cfg.Router != spec.RouterLinearBias {
		return fmt.Sprintf("router %q reads no projection of x: the ports that feed their router N1(x) have a linear one", cfg.Router)
	}
	return ""
}

// normedRouterWeights is ref's router weights computed from N1(x), the
// block's first norm of every position, instead of x (noise and jitter as
// the case draws them).
func normedRouterWeights(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) ([][]float64, error) {
	return ref.RouterWeights(cfg, p, normedInput(cfg, p, in), in.Noise, in.Jitter)
}

// normedInput is N1(x), the block's first norm of every position of x.
func normedInput(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) []*mat.Dense {
	xn := make([]*mat.Dense, len(in.X))
	for b, x := range in.X {
		s, d := x.Dims()
		xn[b] = mat.NewDense(s, d, nil)
		for i := 0; i < s; i++ {
			xn[b].SetRow(i, normedRow(cfg.Block, &p.Block, x.RawRowView(i)))
		}
	}
	return xn
}

// normedRow is N1(x) of one position x: what a router_normed_input
// router reads, in the full forward and in decoding alike.
func normedRow(c spec.BlockConfig, p *ref.BlockParams, x []float64) []float64 {
	if c.Norm == spec.NormLayer {
		return ref.LayerNorm(x, p.Norm1, p.Norm1Bias, c.NormEps)
	}
	return ref.RMSNorm(x, p.Norm1, c.NormEps)
}

// normedInputBackward carries the router's gradient at N1(x)
// (g.RouterInput) back through N1: into x (g.X) and N1's gain and bias.
func normedInputBackward(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, g *ref.LayerGrads) {
	for b, x := range in.X {
		dx := ref.NormBackward(cfg.Block, p.Block.Norm1, p.Block.Norm1Bias, x, g.RouterInput[b], g.Params.Block.Norm1, g.Params.Block.Norm1Bias)
		g.X[b].Add(g.X[b], dx)
	}
}

// normedDecision is the routing decision of a layer whose router reads
// N1(x) (router weights r): the top-k by r under the layer's capacity, or
// under causal routing by the router the sign of r (by the predictor, its
// own logits, which read x), the targets the top-k, with the
// straight-through offsets of dense compute at r's weights. fz is ref's
// decision, whose predictor input it keeps.
func normedDecision(cfg spec.Config, in ref.LayerInputs, fz ref.Frozen, r [][]float64) (ref.Frozen, error) {
	s, _ := in.X[0].Dims()
	k, err := ref.RowCapacities(cfg.Capacity, len(in.X), s, in.Valid)
	if err != nil {
		return fz, err
	}
	topk, err := ref.SelectTopK(r, k, in.Valid)
	if err != nil {
		return fz, err
	}
	byPredictor := cloneSelection(fz.Selection)
	fz.TopK, fz.Selection = topk, topk
	switch cfg.Causal {
	case spec.CausalRouter:
		if fz.Selection, err = ref.SelectCausal(r, in.Valid); err != nil {
			return fz, err
		}
	case spec.CausalPredictor:
		fz.Selection = byPredictor
	}
	if cfg.Compute == spec.ComputeDense {
		g := ref.OutputWeights(cfg.Weighting, r, fz.Selection, in.Valid)
		fz.STEOffset = ref.StraightThroughOffsets(g, fz.Selection.Mask())
	}
	return fz, nil
}

// cloneSelection copies a selection's rows.
func cloneSelection(s ref.Selection) ref.Selection {
	rows := make([][]int, len(s.Rows))
	for b, r := range s.Rows {
		rows[b] = append([]int(nil), r...)
	}
	return ref.Selection{S: s.S, Rows: rows}
}

// normedRouter makes an evaluation of the layer route by the router
// weights of N1(x), computed again at the evaluation's parameters (so that
// its finite differences move them): they are reported, the weights g are
// the configured weighting of them, the multipliers g (or the straight-
// through w) on the tokens the block ran on, the output base + mult·f at
// every token, and the auxiliary losses are computed from them. l.res
// becomes a copy, as in scaleWeight.
func normedRouter(l *layerRun) error {
	r, err := normedRouterWeights(l.cfg, l.p, l.in)
	if err != nil {
		return err
	}
	base := l.base()
	res := *l.res
	sel := res.Frozen.Selection
	res.RouterWeights = r
	res.Weights = ref.OutputWeights(l.cfg.Weighting, r, sel, l.in.Valid)
	if l.cfg.Compute == spec.ComputeDense {
		res.Multipliers = ref.StraightThroughWeights(res.Weights, res.Frozen.STEOffset)
	} else {
		res.Multipliers = make([][]float64, len(r))
		for b := range r {
			res.Multipliers[b] = make([]float64, len(r[b]))
			for _, i := range sel.Rows[b] {
				res.Multipliers[b][i] = res.Weights[b][i]
			}
		}
	}
	res.Out = weightedOutput(base, res.Multipliers, l.upd)
	ref.AuxLosses(l.cfg, &res, sel.Mask(), l.in.Valid)
	l.res, l.out, l.mult = &res, res.Out, res.Multipliers
	return nil
}
