package golden

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// modeSpec is a MoDE case to generate (docs/spec.md §14).
type modeSpec struct {
	name, description string
	catches           []string
	seed              uint64
	batch, seqLen     int
	cfg               spec.MoDEConfig
}

// modeDraw holds one draw of a MoDE case's parameters and inputs.
type modeDraw struct {
	p *ref.MoDEParams
	x []*mat.Dense
	u []*mat.Dense // upstream gradient of out
}

// modeSpecs is the catalogue of MoDE cases.
func modeSpecs() []modeSpec {
	return []modeSpec{
		{name: "layer-mode-staged", description: "Staged Mixture-of-Depths-and-Experts (docs/spec.md §14): the paper's MoD router (linear, capacity 0.5, raw weighting, gather) selects the tokens that enter attention and a mixture of 3 GELU experts with expert-choice routing (softmax gates of N2(h)·W_g, each expert takes the k_e = ⌊0.25·4⌋ = 1 token with the largest gate among the 4 selected tokens); out = x + r·(a + Σ gate·MLP_e) for the selected tokens. Some selected tokens are chosen by no expert, one by several.",
			catches: []string{"mode_ungated_experts"}, seed: 1, batch: 2, seqLen: 8,
			cfg: spec.MoDEConfig{Block: block(), Form: spec.MoDEStaged, Experts: 3, Capacity: 0.5, ExpertCapacity: 0.25}},
		{name: "layer-mode-integrated", description: "Integrated Mixture-of-Depths-and-Experts (docs/spec.md §14): dense attention, then 2 GELU experts and 1 no-op expert with expert-choice routing over all 8 tokens (softmax over the 3 gates, k_e = ⌊0.5·8⌋ = 4 per expert); a token no conventional expert chose keeps x + a. Some tokens are chosen by no expert, some by several.",
			catches: []string{"mode_ungated_experts"}, seed: 1, batch: 2, seqLen: 8,
			cfg: spec.MoDEConfig{Block: block(), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.5}},
	}
}

func drawMoDE(s modeSpec, seed uint64) modeDraw {
	rng := ref.NewRand(seed)
	dr := modeDraw{p: ref.NewMoDEParams(s.cfg, rng)}
	for range s.batch {
		dr.x = append(dr.x, ref.RandomMatrix(rng, s.seqLen, s.cfg.Block.D, 1))
	}
	for range s.batch {
		dr.u = append(dr.u, ref.RandomMatrix(rng, s.seqLen, s.cfg.Block.D, 1))
	}
	return dr
}

// modeGaps returns the distance of each routing decision from a flip: for
// the staged form, the MoD router's gap per row; then, per row, the
// smallest gap of any expert between its k_e-th and (k_e+1)-th gate over
// the tokens that reach the experts (−1 where no expert has a boundary).
func modeGaps(res *ref.MoDEResult) [][]float64 {
	var gaps [][]float64
	if res.RouterWeights != nil {
		k := make([]int, len(res.Selection.Rows))
		for b, sel := range res.Selection.Rows {
			k[b] = len(sel)
		}
		gaps = append(gaps, gapsOf(ref.BoundaryGaps(res.RouterWeights, k, nil)))
	}
	gate := make([]float64, len(res.Selection.Rows))
	for b, sel := range res.Selection.Rows {
		var cols [][]float64
		var ks []int
		for e := range res.Gates[b][0] {
			col := make([]float64, len(sel))
			for t, i := range sel {
				col[t] = res.Gates[b][i][e]
			}
			cols, ks = append(cols, col), append(ks, res.ExpertCapacity[b])
		}
		gate[b] = minGap(gapsOf(ref.BoundaryGaps(cols, ks, nil)))
		if math.IsInf(gate[b], 1) {
			gate[b] = -1
		}
	}
	return append(gaps, gate)
}

// modeCovers reports whether some token that reaches the experts is chosen
// by no conventional expert and some by several, so that a candidate that
// misroutes either kind shows it.
func modeCovers(cfg spec.MoDEConfig, res *ref.MoDEResult) bool {
	none, several := false, false
	for b, sel := range res.Selection.Rows {
		for _, i := range sel {
			n := 0
			for e := range cfg.Experts {
				if slices.Contains(res.Experts[b][e], i) {
					n++
				}
			}
			none, several = none || n == 0, several || n > 1
		}
	}
	return none && several
}

// genMoDE generates a MoDE case, redrawing until every routing decision is
// at least minCaseGap from a tie and the case has a token no expert chose
// and one several experts chose.
func genMoDE(s modeSpec) (*format.Case, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, errorf(s.name, err)
	}
	for attempt := uint64(0); attempt < 200; attempt++ {
		seed := s.seed + attempt
		dr := drawMoDE(s, seed)
		res, err := ref.MoDEForward(s.cfg, dr.p, dr.x)
		if err != nil {
			return nil, errorf(s.name, err)
		}
		gaps := modeGaps(res)
		if slices.ContainsFunc(gaps, func(g []float64) bool { return minGap(g) < minCaseGap }) || !modeCovers(s.cfg, res) {
			continue
		}
		c, err := modeCase(s, seed, dr, res, gaps)
		if err != nil {
			return nil, errorf(s.name, err)
		}
		return c, nil
	}
	return nil, errorf(s.name, fmt.Errorf("no draw in 200 keeps every routing gap above %v with tokens chosen by no expert and by several", minCaseGap))
}

// expertChoiceArray is the expert choice as a B×E′×k_e array of positions.
func expertChoiceArray(ch [][][]int) *format.Array {
	rows, width := len(ch), len(ch[0])
	ke := len(ch[0][0])
	v := make([]int64, 0, rows*width*ke)
	for _, row := range ch {
		for _, c := range row {
			for _, i := range c {
				v = append(v, int64(i))
			}
		}
	}
	return format.Int(v, rows, width, ke)
}

// gatesArray is the gates as a B×S×E′ array.
func gatesArray(g [][][]float64) *format.Array {
	var v []float64
	for _, row := range g {
		for _, gi := range row {
			v = append(v, gi...)
		}
	}
	return format.Float(v, len(g), len(g[0]), len(g[0][0]))
}

func modeCase(s modeSpec, seed uint64, dr modeDraw, res *ref.MoDEResult, gaps [][]float64) (*format.Case, error) {
	cfg := s.cfg
	m := &format.Manifest{
		Format: format.Format, Version: format.Version, Name: s.name, Kind: format.KindMoDE,
		Description: s.description, Catches: s.catches,
		Config:  format.CaseConfig{Batch: s.batch, SeqLen: s.seqLen, MoDE: &cfg},
		Loss:    "sum(upstream.out * out)",
		Routing: format.Routing{Margin: RoutingMargin, Gaps: gaps},
		Provenance: format.Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed,
			Reference: "ref.MoDEForward; gradients: ref.MoDEGradients (analytic, routing frozen)",
		},
	}
	b := newBuilder(m)
	b.add("input.x", format.RoleInput, batchArray(dr.x), nil)
	params := dr.p.Tensors("")
	for _, t := range params {
		b.add("param."+t.Name, format.RoleParam, tensorArray(t), nil)
	}
	b.add("upstream.out", format.RoleUpstream, batchArray(dr.u), nil)

	b.expect("expected.out", batchArray(res.Out))
	if res.RouterWeights != nil {
		b.expect("expected.router_logits", fieldArray(res.RouterWeights, nil))
		b.expect("expected.selected", selectedArray(res.Selection))
	}
	b.expect("expected.gates", gatesArray(res.Gates))
	b.expect("expected.expert_choice", expertChoiceArray(res.Experts))

	loss := func() (float64, error) {
		r, err := ref.MoDEForwardFrozen(cfg, dr.p, dr.x, res.Frozen)
		if err != nil {
			return 0, err
		}
		return dot(r.Out, dr.u), nil
	}
	l, err := loss()
	if err != nil {
		return nil, err
	}
	b.expect("expected.loss", format.Scalar(l))
	_, g, err := ref.MoDEGradients(cfg, dr.p, dr.x, res.Frozen, dr.u)
	if err != nil {
		return nil, err
	}
	expectGradients(b, g.X, params, g.Params.Tensors(""))
	return b.build(), nil
}

// modeDrawOf reads a MoDE case's parameters and inputs.
func modeDrawOf(c *format.Case, s modeSpec) (modeDraw, error) {
	var dr modeDraw
	dr.p = ref.NewMoDEParams(s.cfg, ref.NewRand(0))
	if err := loadParams(c, dr.p.Tensors("")); err != nil {
		return dr, err
	}
	var err error
	dr.x, dr.u, err = inputAndUpstream(c)
	return dr, err
}
