package golden

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// layerSpec is a layer case to generate.
type layerSpec struct {
	name, description string
	catches           []string
	seed              uint64
	batch, seqLen     int
	valid             []int
	cfg               spec.Config
	// ties makes the case test the tie rule: in every row the first token
	// left out gets exactly the router weight of the last token selected.
	ties bool
	// roundingTies, with ties, makes the ties ones that only bf16 sees
	// (makeRoundingTies).
	roundingTies bool
	// threshold makes a causal case test its rule at the threshold: in
	// every row the token whose router weight is nearest 0 gets input 0, so
	// that a linear router without bias gives it exactly 0, and it is not
	// routed (docs/spec.md §9: routed iff r > 0).
	threshold bool
}

// layerDraw holds one draw of a layer case's parameters and inputs.
type layerDraw struct {
	p  *ref.LayerParams
	in ref.LayerInputs
	u  []*mat.Dense // upstream gradient of out, zero at padded positions
}

func drawLayer(s layerSpec, seed uint64) layerDraw {
	rng := ref.NewRand(seed)
	d := s.cfg.Block.D
	var dr layerDraw
	dr.p = ref.NewLayerParams(s.cfg, rng)
	dr.in.Valid = s.valid
	for b := 0; b < s.batch; b++ {
		dr.in.X = append(dr.in.X, ref.RandomMatrix(rng, s.seqLen, d, 1))
	}
	if s.cfg.Router == spec.RouterRandom {
		dr.in.Noise = ref.RandomField(rng, s.batch, s.seqLen)
	}
	if s.cfg.Jitter > 0 {
		dr.in.Jitter = ref.RandomField(rng, s.batch, s.seqLen)
	}
	for b := 0; b < s.batch; b++ {
		u := ref.RandomMatrix(rng, s.seqLen, d, 1)
		for i := validLen(s.valid, b, s.seqLen); i < s.seqLen; i++ {
			for j := 0; j < d; j++ {
				u.Set(i, j, 0)
			}
		}
		dr.u = append(dr.u, u)
	}
	return dr
}

// makeTies copies, in every row, the input of the last selected token onto
// the first token left out, so that their router weights are equal.
func makeTies(s layerSpec, dr layerDraw) error {
	res, err := ref.LayerForward(s.cfg, dr.p, dr.in)
	if err != nil {
		return err
	}
	for b, row := range res.RouterWeights {
		last, first, err := tieBoundary(row, res.Selection.Rows[b], validLen(s.valid, b, s.seqLen))
		if err != nil {
			return fmt.Errorf("row %d: %w", b, err)
		}
		dr.in.X[b].SetRow(first, dr.in.X[b].RawRowView(last))
	}
	return nil
}

// tieBoundary is, in a row of router weights r with the selected positions
// sel and v valid tokens, the selected token with the smallest weight and
// the token left out with the largest: the two a tie at the k-th weight
// makes equal.
func tieBoundary(r []float64, sel []int, v int) (last, first int, err error) {
	last, first = -1, -1
	for i := range v {
		selected := slices.Contains(sel, i)
		if selected && (last < 0 || r[i] < r[last]) {
			last = i
		}
		if !selected && (first < 0 || r[i] > r[first]) {
			first = i
		}
	}
	if last < 0 || first < 0 {
		return 0, 0, fmt.Errorf("no boundary to tie")
	}
	return last, first, nil
}

// makeThreshold sets, in every row, the input of the valid token whose
// router weight is nearest 0 to 0, so that its router weight, x·w, is
// exactly 0.
func makeThreshold(s layerSpec, dr layerDraw) error {
	if s.cfg.Causal != spec.CausalRouter || s.cfg.Router != spec.RouterLinear {
		return fmt.Errorf("a threshold case needs causal routing by a linear router without bias")
	}
	res, err := ref.LayerForward(s.cfg, dr.p, dr.in)
	if err != nil {
		return err
	}
	for b, row := range res.RouterWeights {
		near := 0
		for i := range validLen(s.valid, b, s.seqLen) {
			if math.Abs(row[i]) < math.Abs(row[near]) {
				near = i
			}
		}
		dr.in.X[b].SetRow(near, make([]float64, s.cfg.Block.D))
	}
	return nil
}

// clearOfThreshold reports whether every valid router weight is exactly 0
// or at least minCaseGap from it.
func clearOfThreshold(r [][]float64, valid []int) bool {
	for b, row := range r {
		for _, v := range row[:validLen(valid, b, len(row))] {
			if v != 0 && math.Abs(v) < minCaseGap {
				return false
			}
		}
	}
	return true
}

// genLayer generates a layer case, redrawing until every routing decision is
// at least minCaseGap from a tie (unless the case tests ties). When no draw
// in 100 is, the first draw's routing is separated (separateRouting): at a
// long sequence the gap between the k-th and (k+1)-th largest of S router
// weights is about 1/(S·density), a few thousandths at S = 2048, so that
// hardly any draw is clear of the margin.
func genLayer(s layerSpec) (*Case, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, errorf(s.name, err)
	}
	var first *layerDraw
	var firstSeed uint64
	for attempt := uint64(0); attempt < 100; attempt++ {
		seed := s.seed + attempt
		dr := drawLayer(s, seed)
		if s.ties {
			if err := makeTies(s, dr); err != nil {
				return nil, errorf(s.name, err)
			}
		}
		if s.roundingTies {
			if ok, err := makeRoundingTies(s, dr); err != nil {
				return nil, errorf(s.name, err)
			} else if !ok {
				continue
			}
		}
		if s.threshold {
			if err := makeThreshold(s, dr); err != nil {
				return nil, errorf(s.name, err)
			}
		}
		if !s.ties && !s.threshold {
			// The gaps from the router alone, before the whole forward.
			gaps, err := drawGaps(s, dr)
			if err != nil {
				return nil, errorf(s.name, err)
			}
			if minGap(gaps) < minCaseGap {
				if first == nil {
					first, firstSeed = &dr, seed
				}
				continue
			}
		}
		if c, ok, err := clearCase(s, seed, dr); err != nil || ok {
			return c, err
		}
	}
	if first != nil && s.cfg.Causal != spec.CausalPredictor {
		if err := separateRouting(s, *first); err != nil {
			return nil, errorf(s.name, err)
		}
		if c, ok, err := clearCase(s, firstSeed, *first); err != nil || ok {
			if ok {
				c.Separation = fmt.Sprintf("none of 100 draws kept every routing decision %g clear of a tie (at S = %d the gap between the k-th and (k+1)-th router weight is about 1/(S·density)), so the first draw's router weights were moved %g away from its routing decisions, its selection kept; the case holds none of the near-ties a real row of this length has, which an implementation in bf16 may flip: \"ties\": \"bf16\" generates a case that does (docs/workflow.md, \"At your own configuration and shapes\")",
					minCaseGap, s.seqLen, 2*minCaseGap)
			}
			return c, err
		}
	}
	return nil, errorf(s.name, fmt.Errorf("no draw in 100 keeps every routing gap above %v", minCaseGap))
}

// clearCase is the layer case of draw dr (seed) if every routing decision
// is clear of a tie (or of the threshold) as s asks.
func clearCase(s layerSpec, seed uint64, dr layerDraw) (*Case, bool, error) {
	res, err := ref.LayerForward(s.cfg, dr.p, dr.in)
	if err != nil {
		return nil, false, errorf(s.name, err)
	}
	gaps := layerGaps(s.cfg, res, s.valid)
	if s.threshold && !clearOfThreshold(res.RouterWeights, s.valid) || !s.ties && !s.threshold && minGap(gaps) < minCaseGap {
		return nil, false, nil
	}
	c, err := layerCase(s, seed, dr, res, gaps)
	if err != nil {
		return nil, false, errorf(s.name, err)
	}
	return c, true, nil
}

// drawGaps is layerGaps of draw dr computed from the router (or the
// predictor) alone.
func drawGaps(s layerSpec, dr layerDraw) ([]float64, error) {
	cfg := s.cfg
	if cfg.Causal == spec.CausalPredictor {
		return causalGaps(ref.PredictorLogits(dr.p, dr.in.X), s.valid), nil
	}
	r, err := ref.RouterWeights(cfg, dr.p, dr.in.X, dr.in.Noise, dr.in.Jitter)
	if err != nil {
		return nil, err
	}
	if cfg.Causal == spec.CausalRouter {
		return causalGaps(r, s.valid), nil
	}
	k, err := ref.RowCapacities(cfg.Capacity, s.batch, s.seqLen, s.valid)
	if err != nil {
		return nil, err
	}
	return gapsOf(ref.BoundaryGaps(r, k, s.valid)), nil
}

// separateRouting moves router weights of draw dr away from the routing
// decision by 2·minCaseGap, changing only the input: under top-k routing
// every selected token's weight moves up, under causal routing by the
// router every weight within 2·minCaseGap of 0 moves away from it (0 up).
// A weight r_i moves by δ through x_i += δ·w/‖w‖² (linear routers: w·x
// moves by δ), x_i·(1 + δ/‖x_i‖) (l2norm) or the noise (random). The
// selection stays what it was; a routing the predictor decides cannot be
// moved this way.
func separateRouting(s layerSpec, dr layerDraw) error {
	cfg := s.cfg
	const delta = 2 * minCaseGap
	r, err := ref.RouterWeights(cfg, dr.p, dr.in.X, dr.in.Noise, dr.in.Jitter)
	if err != nil {
		return err
	}
	shift := make([][]float64, s.batch)
	for b := range shift {
		shift[b] = make([]float64, s.seqLen)
	}
	switch cfg.Causal {
	case spec.CausalOff:
		k, err := ref.RowCapacities(cfg.Capacity, s.batch, s.seqLen, s.valid)
		if err != nil {
			return err
		}
		sel, err := ref.SelectTopK(r, k, s.valid)
		if err != nil {
			return err
		}
		for b, row := range sel.Rows {
			for _, i := range row {
				shift[b][i] = delta
			}
		}
	case spec.CausalRouter:
		for b, row := range r {
			for i, v := range row[:validLen(s.valid, b, s.seqLen)] {
				switch {
				case v >= 0 && v < delta:
					shift[b][i] = delta
				case v < 0 && v > -delta:
					shift[b][i] = -delta
				}
			}
		}
	default:
		return fmt.Errorf("causal routing %q: the predictor decides, and its gaps cannot be moved through the router", cfg.Causal)
	}
	var ww float64
	for _, v := range dr.p.Router {
		ww += float64(v * v)
	}
	for b, row := range shift {
		for i, dv := range row {
			if dv == 0 {
				continue
			}
			x := dr.in.X[b].RawRowView(i)
			switch cfg.Router {
			case spec.RouterLinear, spec.RouterLinearBias:
				if ww == 0 {
					return fmt.Errorf("the router's weights are 0: no input moves its weights")
				}
				for j, w := range dr.p.Router {
					x[j] += float64(dv * w / ww)
				}
			case spec.RouterL2Norm:
				n := ref.RouterL2NormWeight(x)
				if n == 0 {
					return fmt.Errorf("row %d position %d: x = 0 cannot be scaled", b, i)
				}
				for j := range x {
					x[j] *= 1 + dv/n
				}
			case spec.RouterRandom:
				dr.in.Noise[b][i] += dv
			}
		}
	}
	return nil
}

// layerGaps is the distance of each row's routing decision from a flip.
func layerGaps(cfg spec.Config, res *ref.LayerResult, valid []int) []float64 {
	switch cfg.Causal {
	case spec.CausalRouter:
		return causalGaps(res.RouterWeights, valid)
	case spec.CausalPredictor:
		return causalGaps(res.PredictorLogits, valid)
	}
	return gapsOf(ref.BoundaryGaps(res.RouterWeights, res.Capacity, valid))
}

func layerCase(s layerSpec, seed uint64, dr layerDraw, res *ref.LayerResult, gaps []float64) (*Case, error) {
	cfg := writtenOut(s.cfg)
	m := &Manifest{
		Format: Format, Version: Version, Name: s.name, Kind: KindLayer,
		Description: s.description, Catches: withComputedCatches(s.catches, []spec.Config{s.cfg}, hasPadding(s.valid, s.seqLen)),
		Config:  CaseConfig{Batch: s.batch, SeqLen: s.seqLen, ValidLengths: s.valid, Layer: &cfg},
		Loss:    "sum(upstream.out * out) + aux.total",
		Routing: Routing{Margin: RoutingMargin, Gaps: [][]float64{gaps}, Ties: s.ties || s.threshold},
		Provenance: Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed,
			Reference: "ref.LayerForward; gradients: ref.LayerGradients (analytic, routing frozen)",
		},
	}
	b := newBuilder(m)
	valid := s.valid
	if valid == nil {
		valid = make([]int, s.batch)
		for i := range valid {
			valid[i] = s.seqLen
		}
	}
	b.add("input.x", RoleInput, batchArray(dr.in.X), nil)
	b.add("input.valid", RoleInput, intsArray(valid), nil)
	if dr.in.Noise != nil {
		b.add("input.noise", RoleInput, fieldArray(dr.in.Noise, nil), nil)
	}
	if dr.in.Jitter != nil {
		b.add("input.jitter", RoleInput, fieldArray(dr.in.Jitter, nil), nil)
	}
	params := dr.p.Tensors("")
	for _, t := range params {
		b.add("param."+t.Name, RoleParam, tensorArray(t), nil)
	}
	b.add("upstream.out", RoleUpstream, batchArray(dr.u), nil)

	b.expect("expected.out", batchArray(res.Out))
	b.expect("expected.router_logits", fieldArray(res.RouterWeights, s.valid))
	b.expect("expected.selected", selectedArray(res.Selection))
	b.expect("expected.weights", fieldArray(res.Weights, s.valid))
	b.expect("expected.multipliers", fieldArray(res.Multipliers, s.valid))
	b.expect("expected.targets", fieldArray(res.Targets, s.valid))
	if cfg.HasPredictor() {
		b.expect("expected.predictor_logits", fieldArray(res.PredictorLogits, s.valid))
		b.expect("expected.predictor_accuracy", Scalar(res.PredictorAccuracy))
		b.expect("expected.aux.predictor_bce", Scalar(res.PredictorBCE))
	}
	if cfg.Aux == spec.AuxRouterBCE {
		b.expect("expected.aux.router_bce", Scalar(res.RouterBCE))
	}
	if cfg.LoadBalanceWeight > 0 {
		b.expect("expected.aux.load_balance", Scalar(res.LoadBalance))
	}
	b.expect("expected.aux.total", Scalar(res.AuxLoss))

	loss := func() (float64, error) {
		r, err := ref.LayerForwardFrozen(cfg, dr.p, dr.in, res.Frozen)
		if err != nil {
			return 0, err
		}
		return dot(r.Out, dr.u) + r.AuxLoss, nil
	}
	l, err := loss()
	if err != nil {
		return nil, err
	}
	b.expect("expected.loss", Scalar(l))
	_, g, err := ref.LayerGradients(cfg, dr.p, dr.in, res.Frozen, dr.u)
	if err != nil {
		return nil, err
	}
	expectGradients(b, g.X, params, g.Params.Tensors(""))
	return b.build(), nil
}

// hasPadding reports whether a row's valid length is short of seqLen.
func hasPadding(valid []int, seqLen int) bool {
	return slices.ContainsFunc(valid, func(v int) bool { return v < seqLen })
}

// dot returns Σ a⊙b over a batch of equally shaped matrices, in row-major
// order with every product rounded (no FMA fusion, see docs/design.md).
func dot(a, b []*mat.Dense) float64 {
	var s float64
	for k := range a {
		x, y := a[k].RawMatrix(), b[k].RawMatrix()
		for i := 0; i < x.Rows; i++ {
			xr, yr := x.Data[i*x.Stride:i*x.Stride+x.Cols], y.Data[i*y.Stride:i*y.Stride+y.Cols]
			for j, v := range xr {
				s += float64(v * yr[j])
			}
		}
	}
	return s
}
