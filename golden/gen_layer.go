package golden

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

func drawLayer(s oracle.LayerSpec, seed uint64) oracle.LayerDraw {
	rng := ref.NewRand(seed)
	d := s.Config.Block.D
	var dr oracle.LayerDraw
	dr.P = ref.NewLayerParams(s.Config, rng)
	dr.In.Valid = s.Valid
	// In one slice each, which the case's arrays then share
	// (oracle.BatchArray).
	dr.In.X = ref.RandomBatch(rng, s.Batch, s.SeqLen, d, 1)
	if s.Config.Router == spec.RouterRandom {
		dr.In.Noise = ref.RandomField(rng, s.Batch, s.SeqLen)
	}
	if s.Config.Jitter > 0 {
		dr.In.Jitter = ref.RandomField(rng, s.Batch, s.SeqLen)
	}
	dr.U = ref.RandomBatch(rng, s.Batch, s.SeqLen, d, 1)
	for b, u := range dr.U {
		for i := oracle.ValidLen(s.Valid, b, s.SeqLen); i < s.SeqLen; i++ {
			clear(u.RawRowView(i))
		}
	}
	return dr
}

// makeTies copies, in every row, the input of the last selected token onto
// the first token left out, so that their router weights are equal.
func makeTies(s oracle.LayerSpec, dr oracle.LayerDraw) error {
	res, err := ref.LayerForward(s.Config, dr.P, dr.In)
	if err != nil {
		return err
	}
	for b, row := range res.RouterWeights {
		last, first, err := tieBoundary(row, res.Selection.Rows[b], oracle.ValidLen(s.Valid, b, s.SeqLen))
		if err != nil {
			return fmt.Errorf("row %d: %w", b, err)
		}
		dr.In.X[b].SetRow(first, dr.In.X[b].RawRowView(last))
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
// causal routing score is nearest 0 to 0, so that the score is exactly 0:
// the router weight x·w of a linear router, or, routed by the predictor,
// its logit SiLU(x·W1 + b1)·W2 + b2 with its biases b1 and b2 set to 0.
func makeThreshold(s oracle.LayerSpec, dr oracle.LayerDraw) error {
	switch {
	case s.Config.Causal == spec.CausalRouter && s.Config.Router == spec.RouterLinear:
	case s.Config.Causal == spec.CausalPredictor:
		clear(dr.P.PredB1)
		clear(dr.P.PredB2)
	default:
		return fmt.Errorf("a threshold case needs causal routing by a linear router without bias, or by the predictor")
	}
	res, err := ref.LayerForward(s.Config, dr.P, dr.In)
	if err != nil {
		return err
	}
	for b, row := range causalScores(s.Config, res) {
		near := 0
		for i := range oracle.ValidLen(s.Valid, b, s.SeqLen) {
			if math.Abs(row[i]) < math.Abs(row[near]) {
				near = i
			}
		}
		dr.In.X[b].SetRow(near, make([]float64, s.Config.Block.D))
	}
	return nil
}

// causalScores are the scores a causally routed layer routes by: its
// router weights, or its predictor's logits.
func causalScores(cfg spec.Config, res *ref.LayerResult) [][]float64 {
	if cfg.Causal == spec.CausalPredictor {
		return res.PredictorLogits
	}
	return res.RouterWeights
}

// clearOfThreshold reports whether every valid score is exactly 0 or at
// least minCaseGap from it.
func clearOfThreshold(r [][]float64, valid []int) bool {
	for b, row := range r {
		for _, v := range row[:oracle.ValidLen(valid, b, len(row))] {
			if v != 0 && math.Abs(v) < oracle.MinCaseGap {
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
func genLayer(s oracle.LayerSpec) (*format.Case, error) {
	c, _, err := genLayerTruth(s)
	return c, err
}

// genLayerTruth is genLayer, with ref's forward pass of the case kept for
// its backward pass (nil for a threshold case), which the case's measured
// catches start from (diagnose.MeasuredLayerCatches).
func genLayerTruth(s oracle.LayerSpec) (*format.Case, *ref.LayerResult, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, nil, oracle.Errorf(s.Name, err)
	}
	s.Catches = diagnose.ComputedCatches(s.Catches, []spec.Config{s.Config}, oracle.HasPadding(s.Valid, s.SeqLen))
	var first *oracle.LayerDraw
	var firstSeed uint64
	redraws := maxRedraws(s)
	tried := fmt.Sprintf("none of %d draws kept every routing decision %g clear of a tie", 1+redraws, oracle.MinCaseGap)
	if redraws < 99 {
		tried += fmt.Sprintf(" (a draw of this configuration is %.3g values, so at most %d redraws: maxRedrawValues)", drawValues(s), redraws)
	}
	var next chan oracle.LayerDraw // the next seed's draw, under way
	for attempt := uint64(0); attempt <= redraws; attempt++ {
		seed := s.Seed + attempt
		var dr oracle.LayerDraw
		if next != nil {
			dr = <-next
		} else {
			dr = drawLayer(s, seed)
		}
		next = nil
		if attempt > 0 && attempt < redraws && runtime.GOMAXPROCS(0) > 1 {
			// Redrawing: the next draw on another core while this one
			// is measured (a draw is a function of its seed alone, so
			// the bits are those of drawing in turn).
			ch := make(chan oracle.LayerDraw, 1)
			go func() { ch <- drawLayer(s, seed+1) }()
			next = ch
		}
		if s.Ties {
			if err := makeTies(s, dr); err != nil {
				return nil, nil, oracle.Errorf(s.Name, err)
			}
		}
		if s.RoundingTies {
			if ok, err := makeRoundingTies(s, dr); err != nil {
				return nil, nil, oracle.Errorf(s.Name, err)
			} else if !ok {
				continue
			}
		}
		if s.Threshold {
			if err := makeThreshold(s, dr); err != nil {
				return nil, nil, oracle.Errorf(s.Name, err)
			}
		}
		if !s.Ties && !s.Threshold {
			// The gaps from the router alone, before the whole forward.
			gaps, chance, err := drawGaps(s, dr)
			if err != nil {
				return nil, nil, oracle.Errorf(s.Name, err)
			}
			if oracle.MinGap(gaps) < oracle.MinCaseGap {
				if first == nil {
					first, firstSeed = &dr, seed
					if s.Config.Causal != spec.CausalPredictor && float64(redraws)*chance < maxRedrawChance {
						// Out of reach: the redraws would end
						// where this does, at separateRouting.
						tried = fmt.Sprintf("the first draw did not keep every routing decision %g clear of a tie, and its router weights put the chance that any of the next %d is at %.2g, under %g, so none was drawn", oracle.MinCaseGap, redraws, float64(redraws)*chance, maxRedrawChance)
						break
					}
				}
				continue
			}
		}
		if c, truth, ok, err := clearCase(s, seed, dr); err != nil || ok {
			return c, truth, err
		}
	}
	if first != nil && s.Config.Causal != spec.CausalPredictor {
		if err := separateRouting(s, *first); err != nil {
			return nil, nil, oracle.Errorf(s.Name, err)
		}
		if c, truth, ok, err := clearCase(s, firstSeed, *first); err != nil || ok {
			if ok {
				c.Separation = fmt.Sprintf("%s (at S = %d the gap between the k-th and (k+1)-th router weight is about 1/(S·density)), so the first draw's router weights were moved %g away from its routing decisions, its selection kept; the case holds none of the near-ties a real row of this length has, which an implementation in bf16 may flip: \"ties\": \"bf16\" generates a case that does (docs/workflow.md, \"At your own configuration and shapes\")",
					tried, s.SeqLen, 2*oracle.MinCaseGap)
			}
			return c, truth, err
		}
	}
	return nil, nil, oracle.Errorf(s.Name, fmt.Errorf("no draw in %d keeps every routing gap above %v", 1+redraws, oracle.MinCaseGap))
}

// clearCase is the layer case of draw dr (seed) if every routing decision
// is clear of a tie (or of the threshold) as s asks. Outside threshold
// cases the draw reaching it is clear already (drawGaps measured its gaps
// from the router alone) or tests ties, so the forward pass is made once,
// kept for the gradients (ref.LayerForwardGradients: the bits of
// ref.LayerForward and then ref.LayerGradients) and returned as the truth
// (nil for a threshold case).
func clearCase(s oracle.LayerSpec, seed uint64, dr oracle.LayerDraw) (*format.Case, *ref.LayerResult, bool, error) {
	var res *ref.LayerResult
	var g *ref.LayerGrads
	var err error
	if s.Threshold {
		res, err = ref.LayerForward(s.Config, dr.P, dr.In)
	} else {
		res, g, err = ref.LayerForwardGradients(oracle.WrittenOut(s.Config), dr.P, dr.In, dr.U)
	}
	if err != nil {
		return nil, nil, false, oracle.Errorf(s.Name, err)
	}
	gaps := oracle.LayerGaps(s.Config, res, s.Valid)
	if s.Threshold && !clearOfThreshold(causalScores(s.Config, res), s.Valid) || !s.Ties && !s.Threshold && oracle.MinGap(gaps) < oracle.MinCaseGap {
		return nil, nil, false, nil
	}
	var c *format.Case
	var truth *ref.LayerResult
	if g != nil {
		truth = res
		c, err = oracle.LayerCaseOf(s, seed, dr, res, g, gaps)
	} else {
		c, err = oracle.LayerCase(s, seed, dr, res, gaps)
	}
	if err != nil {
		return nil, nil, false, oracle.Errorf(s.Name, err)
	}
	return c, truth, true, nil
}

// maxRedrawChance is the chance below which gen does not redraw a layer
// case whose first draw is too close to a tie: when the first draw's
// router weights put the chance that any of the other 99 draws is clear
// of the margin below it (clearChance), the first draw's routing is
// separated at once, as it would be after 99 redraws that failed. At
// S = 2048 and 12.5 % capacity the estimate is about 1 % for three rows,
// and each redraw costs as much as drawing the case.
const maxRedrawChance = 0.05

// maxRedrawValues bounds the values gen draws in redrawing a layer case
// whose draw is too close to a tie: 2^30, about 40 s of CPU at the 36 ns a
// value measured (docs/performance.md). Every case of the corpus, and the
// d = 512 example at S = 2048 (1.0e7 values a draw), is redrawn up to 99
// times as before; a layer at Llama-3-8B's width (2.4e8 values a draw,
// which also holds two draws at once while redrawing) at most 4 times
// before its routing is separated.
const maxRedrawValues = 1 << 30

// drawValues is the number of values drawLayer draws for s: the
// parameters, the input and upstream gradient, and the noise or jitter
// fields.
func drawValues(s oracle.LayerSpec) float64 {
	tokens := float64(float64(s.Batch) * float64(s.SeqLen))
	return float64(s.Config.ParamCount()) + float64(2*tokens*float64(s.Config.Block.D)) + float64(2*tokens)
}

// maxRedraws is how many times gen redraws a layer case of s whose draw is
// too close to a tie: 99, fewer where that would draw more than
// maxRedrawValues.
func maxRedraws(s oracle.LayerSpec) uint64 {
	return uint64(min(99, math.Floor(maxRedrawValues/drawValues(s))))
}

// drawGaps is layerGaps of draw dr computed from the router (or the
// predictor) alone, and the chance that a draw like it is clear of the
// margin (clearChance; 1 under routing by the predictor).
func drawGaps(s oracle.LayerSpec, dr oracle.LayerDraw) (gaps []float64, chance float64, err error) {
	cfg := s.Config
	if cfg.Causal == spec.CausalPredictor {
		return oracle.CausalGaps(ref.PredictorLogits(dr.P, dr.In.X), s.Valid), 1, nil
	}
	r, err := ref.RouterWeights(cfg, dr.P, dr.In.X, dr.In.Noise, dr.In.Jitter)
	if err != nil {
		return nil, 0, err
	}
	if cfg.Causal == spec.CausalRouter {
		return oracle.CausalGaps(r, s.Valid), clearChance(r, nil, s.Valid), nil
	}
	k, err := ref.RowCapacities(cfg.Capacity, s.Batch, s.SeqLen, s.Valid)
	if err != nil {
		return nil, 0, err
	}
	return oracle.GapsOf(ref.BoundaryGaps(r, k, s.Valid)), clearChance(r, k, s.Valid), nil
}

// clearChance estimates, from one draw's router weights r, the chance
// that a draw of the same distribution keeps every routing decision
// oracle.MinCaseGap clear of a tie. Near a decision boundary t the
// weights of a row are locally a Poisson process whose rate λ is
// estimated from the n weights within w = 10·MinCaseGap of t (λ = n/2w).
// Under top-k routing (k[b] of row b selected; t midway between the k-th
// and (k+1)-th weight) the row is clear when the gap between those two is
// at least MinCaseGap, chance exp(−λ·MinCaseGap); under causal routing
// (k nil; t = 0) when no weight is within MinCaseGap of 0, chance
// exp(−2λ·MinCaseGap). Rows are drawn independently, so the chances
// multiply. Rows with nothing to decide count as clear.
func clearChance(r [][]float64, k []int, valid []int) float64 {
	const m = oracle.MinCaseGap
	const w = 10 * m
	var exponent float64
	for b, row := range r {
		row = row[:oracle.ValidLen(valid, b, len(row))]
		t, width := 0.0, 2*m
		if k != nil {
			if k[b] == 0 || k[b] >= len(row) {
				continue
			}
			sorted := slices.Clone(row)
			slices.SortFunc(sorted, func(a, b float64) int { return cmp.Compare(b, a) })
			t, width = (sorted[k[b]-1]+sorted[k[b]])/2, m
		}
		n := 0
		for _, v := range row {
			if math.Abs(v-t) < w {
				n++
			}
		}
		exponent += float64(float64(n) / (2 * w) * width)
	}
	return elem.Exp(-exponent)
}

// separateRouting moves router weights of draw dr away from the routing
// decision by 2·minCaseGap, changing only the input: under top-k routing
// every selected token's weight moves up, under causal routing by the
// router every weight within 2·minCaseGap of 0 moves away from it (0 up).
// A weight r_i moves by δ through x_i += δ·w/‖w‖² (linear routers: w·x
// moves by δ), x_i·(1 + δ/‖x_i‖) (l2norm) or the noise (random). The
// selection stays what it was; a routing the predictor decides cannot be
// moved this way.
func separateRouting(s oracle.LayerSpec, dr oracle.LayerDraw) error {
	cfg := s.Config
	const delta = 2 * oracle.MinCaseGap
	r, err := ref.RouterWeights(cfg, dr.P, dr.In.X, dr.In.Noise, dr.In.Jitter)
	if err != nil {
		return err
	}
	shift := make([][]float64, s.Batch)
	for b := range shift {
		shift[b] = make([]float64, s.SeqLen)
	}
	switch cfg.Causal {
	case spec.CausalOff:
		k, err := ref.RowCapacities(cfg.Capacity, s.Batch, s.SeqLen, s.Valid)
		if err != nil {
			return err
		}
		sel, err := ref.SelectTopK(r, k, s.Valid)
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
			for i, v := range row[:oracle.ValidLen(s.Valid, b, s.SeqLen)] {
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
	for _, v := range dr.P.Router {
		ww += float64(v * v)
	}
	for b, row := range shift {
		for i, dv := range row {
			if dv == 0 {
				continue
			}
			x := dr.In.X[b].RawRowView(i)
			switch cfg.Router {
			case spec.RouterLinear, spec.RouterLinearBias:
				if ww == 0 {
					return fmt.Errorf("the router's weights are 0: no input moves its weights")
				}
				for j, w := range dr.P.Router {
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
				dr.In.Noise[b][i] += dv
			}
		}
	}
	return nil
}
