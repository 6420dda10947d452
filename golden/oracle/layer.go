package oracle

import (
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// LayerSpec is a layer case to generate.
type LayerSpec struct {
	Name, Description string
	Catches           []string
	Seed              uint64
	Batch, SeqLen     int
	Valid             []int
	Config            spec.Config
	// ties makes the case test the tie rule: in every row the first token
	// left out gets exactly the router weight of the last token selected.
	Ties bool
	// roundingTies, with ties, makes the ties ones that only bf16 sees
	// (makeRoundingTies).
	RoundingTies bool
	// threshold makes a causal case test its rule at the threshold: in
	// every row the token whose router weight is nearest 0 gets input 0, so
	// that a linear router without bias gives it exactly 0, and it is not
	// routed (docs/spec.md §9: routed iff r > 0).
	Threshold bool
}

// LayerDraw holds one draw of a layer case's parameters and inputs.
type LayerDraw struct {
	P  *ref.LayerParams
	In ref.LayerInputs
	U  []*mat.Dense // upstream gradient of out, zero at padded positions
}

func LayerCase(s LayerSpec, seed uint64, dr LayerDraw, res *ref.LayerResult, gaps []float64) (*format.Case, error) {
	_, g, err := ref.LayerGradients(WrittenOut(s.Config), dr.P, dr.In, res.Frozen, dr.U)
	if err != nil {
		return nil, err
	}
	return LayerCaseOf(s, seed, dr, res, g, gaps)
}

// LayerCaseOf is LayerCase with the gradients g of Σ dr.U·out at res's
// decision already computed (ref.LayerForwardGradients makes res and g in
// one forward pass): the case's loss is res's, which is what
// ref.LayerForwardFrozen at res.Frozen computes, bit for bit. The case's
// arrays share the storage of dr's parameters, of res.Out and g, and of
// dr's input and upstream gradient where each is one flat batch
// (BatchArray): nothing may write to them after.
func LayerCaseOf(s LayerSpec, seed uint64, dr LayerDraw, res *ref.LayerResult, g *ref.LayerGrads, gaps []float64) (*format.Case, error) {
	cfg := WrittenOut(s.Config)
	m := &format.Manifest{
		Format: format.Format, Version: format.Version, Name: s.Name, Kind: format.KindLayer,
		Description: s.Description, Catches: s.Catches,
		Config:  format.CaseConfig{Batch: s.Batch, SeqLen: s.SeqLen, ValidLengths: s.Valid, Layer: &cfg},
		Loss:    "sum(upstream.out * out) + aux.total",
		Routing: format.Routing{Margin: RoutingMargin, Gaps: [][]float64{gaps}, Ties: s.Ties || s.Threshold},
		Provenance: format.Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed,
			Reference: "ref.LayerForward; gradients: ref.LayerGradients (analytic, routing frozen)",
		},
	}
	b := NewBuilder(m)
	valid := s.Valid
	if valid == nil {
		valid = make([]int, s.Batch)
		for i := range valid {
			valid[i] = s.SeqLen
		}
	}
	b.Add("input.x", format.RoleInput, BatchArray(dr.In.X), nil)
	b.Add("input.valid", format.RoleInput, IntsArray(valid), nil)
	if dr.In.Noise != nil {
		b.Add("input.noise", format.RoleInput, FieldArray(dr.In.Noise, nil), nil)
	}
	if dr.In.Jitter != nil {
		b.Add("input.jitter", format.RoleInput, FieldArray(dr.In.Jitter, nil), nil)
	}
	params := dr.P.Tensors("")
	for _, t := range params {
		b.Add("param."+t.Name, format.RoleParam, format.Float(t.Data, t.Shape...), nil)
	}
	b.Add("upstream.out", format.RoleUpstream, BatchArray(dr.U), nil)

	b.Expect("expected.out", BatchArray(res.Out))
	b.Expect("expected.router_logits", FieldArray(res.RouterWeights, s.Valid))
	b.Expect("expected.selected", SelectedArray(res.Selection))
	b.Expect("expected.weights", FieldArray(res.Weights, s.Valid))
	b.Expect("expected.multipliers", FieldArray(res.Multipliers, s.Valid))
	b.Expect("expected.targets", FieldArray(res.Targets, s.Valid))
	if cfg.HasPredictor() {
		b.Expect("expected.predictor_logits", FieldArray(res.PredictorLogits, s.Valid))
		b.Expect("expected.predictor_accuracy", format.Scalar(res.PredictorAccuracy))
		b.Expect("expected.aux.predictor_bce", format.Scalar(res.PredictorBCE))
	}
	if cfg.Aux == spec.AuxRouterBCE {
		b.Expect("expected.aux.router_bce", format.Scalar(res.RouterBCE))
	}
	if cfg.LoadBalanceWeight > 0 {
		b.Expect("expected.aux.load_balance", format.Scalar(res.LoadBalance))
	}
	b.Expect("expected.aux.total", format.Scalar(res.AuxLoss))

	b.Expect("expected.loss", format.Scalar(Dot(res.Out, dr.U)+res.AuxLoss))
	ExpectGradients(b, g.X, params, g.Params.Tensors(""))
	return b.Build(), nil
}

// LayerGaps is the distance of each row's routing decision from a flip.
func LayerGaps(cfg spec.Config, res *ref.LayerResult, valid []int) []float64 {
	switch cfg.Causal {
	case spec.CausalRouter:
		return CausalGaps(res.RouterWeights, valid)
	case spec.CausalPredictor:
		return CausalGaps(res.PredictorLogits, valid)
	}
	return GapsOf(ref.BoundaryGaps(res.RouterWeights, res.Capacity, valid))
}

// HasPadding reports whether a row's valid length is short of seqLen.
func HasPadding(valid []int, seqLen int) bool {
	return slices.ContainsFunc(valid, func(v int) bool { return v < seqLen })
}

// Dot returns Σ a⊙b over a batch of equally shaped matrices, compensated
// (ref.Sum: as if in twice float64's precision, then rounded), so that a
// case's loss, a sum of B·S·d products that may cancel, is the exactly
// rounded value to within a rounding (docs/tolerances.md).
func Dot(a, b []*mat.Dense) float64 {
	var s ref.Sum
	for k := range a {
		x, y := a[k].RawMatrix(), b[k].RawMatrix()
		for i := 0; i < x.Rows; i++ {
			xr, yr := x.Data[i*x.Stride:i*x.Stride+x.Cols], y.Data[i*y.Stride:i*y.Stride+y.Cols]
			for j, v := range xr {
				s.AddProduct(v, yr[j])
			}
		}
	}
	return s.Value()
}
