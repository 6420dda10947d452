package golden

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

func drawModel(s oracle.ModelSpec, seed uint64) (*ref.ModelParams, ref.ModelInputs) {
	p := ref.NewModelParams(s.Config, seed)
	rng := ref.NewRand(seed ^ 0x5eed)
	tokens, targets := ref.RandomTokens(rng, s.Batch, s.SeqLen, s.Config.Vocab)
	in := ref.ModelInputs{Tokens: tokens, Targets: targets, Valid: s.Valid}
	for b := range targets {
		for i := oracle.ValidLen(s.Valid, b, s.SeqLen); i < s.SeqLen; i++ {
			tokens[b][i], targets[b][i] = 0, ref.IgnoreTarget
		}
	}
	for _, l := range s.Config.Layers {
		var noise, jitter [][]float64
		if l.Routed && l.Config.Router == spec.RouterRandom {
			noise = ref.RandomField(rng, s.Batch, s.SeqLen)
		}
		if l.Routed && l.Config.Jitter > 0 {
			jitter = ref.RandomField(rng, s.Batch, s.SeqLen)
		}
		in.Noise = append(in.Noise, noise)
		in.Jitter = append(in.Jitter, jitter)
	}
	return p, in
}

// genModel generates a model or decode case, redrawing until every routing
// decision of every routed layer is at least minCaseGap from a flip. When
// no draw in 100 is, or the first draw's router weights put the chance
// that any of the next 99 is under maxRedrawChance (as at long sequences:
// genLayer), the first draw's routing is moved apart
// (separateModelRouting), unless the case is about ties or the predictor
// decides.
func genModel(s oracle.ModelSpec) (*format.Case, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, oracle.Errorf(s.Name, err)
	}
	s.Catches = diagnose.ModelCatches(s)
	movable := !s.Ties && routersMovable(s.Config)
	tried := fmt.Sprintf("none of 100 draws kept every routing decision %g clear of a tie", oracle.MinCaseGap)
	for attempt := uint64(0); attempt < 100; attempt++ {
		seed := s.Seed + attempt
		p, in := drawModel(s, seed)
		if s.Ties {
			if err := makeModelTies(s, p, in); err != nil {
				return nil, oracle.Errorf(s.Name, err)
			}
		}
		res, err := ref.ModelForward(s.Config, p, in)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		var gaps [][]float64
		smallest := 1.0
		for l, lr := range res.Layers {
			if lr == nil {
				continue
			}
			g := oracle.LayerGaps(s.Config.Layers[l].Config, lr, s.Valid)
			gaps = append(gaps, g)
			if !s.Ties || l > 0 {
				smallest = min(smallest, oracle.MinGap(g))
			}
		}
		if s.Ties && slices.ContainsFunc(gaps[0], func(g float64) bool { return g != 0 }) {
			return nil, oracle.Errorf(s.Name, fmt.Errorf("the first layer's router weights do not tie in every row: gaps %v", gaps[0]))
		}
		if s.Distinct && !rowsDiffer(res) {
			continue
		}
		if smallest < oracle.MinCaseGap {
			if attempt == 0 && movable {
				if chance := modelClearChance(s, res); float64(99*chance) < maxRedrawChance {
					tried = fmt.Sprintf("the first draw did not keep every routing decision %g clear of a tie, and its router weights put the chance that any of the next 99 is at %.2g, under %g, so none was drawn", oracle.MinCaseGap, float64(99*chance), maxRedrawChance)
					break
				}
			}
			continue
		}
		c, err := oracle.ModelCase(s, seed, p, in, res, gaps)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		return c, nil
	}
	if movable {
		if c, done, err := separatedModelCase(s); err != nil || c != nil {
			if c != nil {
				c.Separation = fmt.Sprintf("%s (at S = %d the gap between the k-th and (k+1)-th router weight is about 1/(S·density)), so in the first draw each routed layer's router weights were moved, in layer order, until every routing decision is at least %g from its boundary (%s); the case holds none of the near-ties a real row of this length has, which an implementation in bf16 may flip",
					tried, s.SeqLen, 2*oracle.MinCaseGap, strings.Join(done, "; "))
			}
			return c, err
		}
	}
	return nil, oracle.Errorf(s.Name, fmt.Errorf("no draw in 100 keeps every routing gap above %v", oracle.MinCaseGap))
}

// separatedModelCase is the case of s's first draw with its routing moved
// apart (separateModelRouting) and what was done, or nil if the gaps are
// still short (as when moving rows apart made two rows route alike).
func separatedModelCase(s oracle.ModelSpec) (*format.Case, []string, error) {
	p, in := drawModel(s, s.Seed)
	done, err := separateModelRouting(s, p, in)
	if err != nil {
		return nil, nil, oracle.Errorf(s.Name, err)
	}
	res, err := ref.ModelForward(s.Config, p, in)
	if err != nil {
		return nil, nil, oracle.Errorf(s.Name, err)
	}
	var gaps [][]float64
	smallest := 1.0
	for l, lr := range res.Layers {
		if lr != nil {
			g := oracle.LayerGaps(s.Config.Layers[l].Config, lr, s.Valid)
			gaps = append(gaps, g)
			smallest = min(smallest, oracle.MinGap(g))
		}
	}
	if smallest < oracle.MinCaseGap || s.Distinct && !rowsDiffer(res) {
		return nil, nil, nil
	}
	c, err := oracle.ModelCase(s, s.Seed, p, in, res, gaps)
	if err != nil {
		return nil, nil, oracle.Errorf(s.Name, err)
	}
	return c, done, nil
}

// modelClearChance is the chance, estimated from one draw's result res,
// that a draw of s keeps every routed layer's decisions MinCaseGap clear
// of a tie: the product of the layers' clearChance, as if they were drawn
// independently.
func modelClearChance(s oracle.ModelSpec, res *ref.ModelResult) float64 {
	chance := 1.0
	for l, lr := range res.Layers {
		if lr == nil {
			continue
		}
		var k []int
		if s.Config.Layers[l].Config.Causal == spec.CausalOff {
			k = lr.Capacity
		}
		chance = float64(chance * clearChance(lr.RouterWeights, k, s.Valid))
	}
	return chance
}

// routersMovable reports whether every routed layer of c decides by
// router weights that separateRouter can move: not by the predictor, not
// by the l2norm router, which has no weights.
func routersMovable(c spec.ModelConfig) bool {
	for _, ml := range c.Layers {
		if ml.Routed && (ml.Config.Causal == spec.CausalPredictor || ml.Config.Router == spec.RouterL2Norm) {
			return false
		}
	}
	return true
}

// makeModelTies copies, in every row, the token at the first layer's last
// selected position onto its first position left out. With rotary
// positions the first layer's input is the token's embedding alone, so
// the two router weights are then exactly equal: a tie at the k-th weight,
// which the lower position wins.
func makeModelTies(s oracle.ModelSpec, p *ref.ModelParams, in ref.ModelInputs) error {
	if !s.Config.Layers[0].Routed || s.Config.Block().Positions != spec.PositionRoPE || s.Config.Layers[0].Config.Router != spec.RouterLinear {
		return fmt.Errorf("a model ties case needs a first layer routed by a linear router, with rotary positions")
	}
	res, err := ref.ModelForward(s.Config, p, in)
	if err != nil {
		return err
	}
	lr := res.Layers[0]
	for b, row := range lr.RouterWeights {
		last, first, err := tieBoundary(row, lr.Selection.Rows[b], oracle.ValidLen(s.Valid, b, s.SeqLen))
		if err != nil {
			return fmt.Errorf("row %d: %w", b, err)
		}
		in.Tokens[b][first] = in.Tokens[b][last]
	}
	return nil
}

// rowsDiffer reports whether every routed layer of res routes each row
// through a different set of positions.
func rowsDiffer(res *ref.ModelResult) bool {
	for _, lr := range res.Layers {
		if lr == nil {
			continue
		}
		rows := lr.Selection.Rows
		for a := range rows {
			for b := a + 1; b < len(rows); b++ {
				if slices.Equal(rows[a], rows[b]) {
					return false
				}
			}
		}
	}
	return true
}
