package oracle

import (
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// MoDESpec is a MoDE case to generate (docs/spec.md §14).
type MoDESpec struct {
	Name, Description string
	Catches           []string
	Seed              uint64
	Batch, SeqLen     int
	Config            spec.MoDEConfig
}

// MoDEDraw holds one draw of a MoDE case's parameters and inputs.
type MoDEDraw struct {
	P *ref.MoDEParams
	X []*mat.Dense
	U []*mat.Dense // upstream gradient of out
}

func MoDECase(s MoDESpec, seed uint64, dr MoDEDraw, res *ref.MoDEResult, gaps [][]float64) (*format.Case, error) {
	cfg := s.Config
	m := &format.Manifest{
		Format: format.Format, Version: format.Version, Name: s.Name, Kind: format.KindMoDE,
		Description: s.Description, Catches: s.Catches,
		Config:  format.CaseConfig{Batch: s.Batch, SeqLen: s.SeqLen, MoDE: &cfg},
		Loss:    "sum(upstream.out * out)",
		Routing: format.Routing{Margin: RoutingMargin, Gaps: gaps},
		Provenance: format.Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed,
			Reference: "ref.MoDEForward; gradients: ref.MoDEGradients (analytic, routing frozen)",
		},
	}
	b := NewBuilder(m)
	b.Add("input.x", format.RoleInput, BatchArray(dr.X), nil)
	params := dr.P.Tensors("")
	for _, t := range params {
		b.Add("param."+t.Name, format.RoleParam, TensorArray(t), nil)
	}
	b.Add("upstream.out", format.RoleUpstream, BatchArray(dr.U), nil)

	b.Expect("expected.out", BatchArray(res.Out))
	if res.RouterWeights != nil {
		b.Expect("expected.router_logits", FieldArray(res.RouterWeights, nil))
		b.Expect("expected.selected", SelectedArray(res.Selection))
	}
	b.Expect("expected.gates", GatesArray(res.Gates))
	b.Expect("expected.expert_choice", ExpertChoiceArray(res.Experts))

	loss := func() (float64, error) {
		r, err := ref.MoDEForwardFrozen(cfg, dr.P, dr.X, res.Frozen)
		if err != nil {
			return 0, err
		}
		return Dot(r.Out, dr.U), nil
	}
	l, err := loss()
	if err != nil {
		return nil, err
	}
	b.Expect("expected.loss", format.Scalar(l))
	_, g, err := ref.MoDEGradients(cfg, dr.P, dr.X, res.Frozen, dr.U)
	if err != nil {
		return nil, err
	}
	ExpectGradients(b, g.X, params, g.Params.Tensors(""))
	return b.Build(), nil
}

// MoDEGaps returns the distance of each routing decision from a flip: for
// the staged form, the MoD router's gap per row; then, per row, the
// smallest gap of any expert between its k_e-th and (k_e+1)-th gate over
// the tokens that reach the experts (−1 where no expert has a boundary).
func MoDEGaps(res *ref.MoDEResult) [][]float64 {
	var gaps [][]float64
	if res.RouterWeights != nil {
		k := make([]int, len(res.Selection.Rows))
		for b, sel := range res.Selection.Rows {
			k[b] = len(sel)
		}
		gaps = append(gaps, GapsOf(ref.BoundaryGaps(res.RouterWeights, k, nil)))
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
		gate[b] = MinGap(GapsOf(ref.BoundaryGaps(cols, ks, nil)))
		if math.IsInf(gate[b], 1) {
			gate[b] = -1
		}
	}
	return append(gaps, gate)
}

// MoDEDrawOf reads a MoDE case's parameters and inputs.
func MoDEDrawOf(c *format.Case, s MoDESpec) (MoDEDraw, error) {
	var dr MoDEDraw
	dr.P = ref.NewMoDEParams(s.Config, ref.NewRand(0))
	if err := LoadParams(c, dr.P.Tensors("")); err != nil {
		return dr, err
	}
	var err error
	dr.X, dr.U, err = InputAndUpstream(c)
	return dr, err
}

// ExpertChoiceArray is the expert choice as a B×E′×k_e array of positions.
func ExpertChoiceArray(ch [][][]int) *format.Array {
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

// GatesArray is the gates as a B×S×E′ array.
func GatesArray(g [][][]float64) *format.Array {
	var v []float64
	for _, row := range g {
		for _, gi := range row {
			v = append(v, gi...)
		}
	}
	return format.Float(v, len(g), len(g[0]), len(g[0][0]))
}
