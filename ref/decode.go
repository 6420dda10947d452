package ref

import (
	"fmt"
	"math"

	"github.com/modref/modref/spec"
)

// Decoder is token-by-token decoding of one sequence in causal routing mode
// (docs/spec.md §9). Each layer has its own KVCache: a routed layer's cache
// holds only the tokens routed through it, at their original positions; a
// dense layer's, and the attention of an MLP-only routed layer, every token.
type Decoder struct {
	cfg    spec.ModelConfig
	p      *ModelParams
	Caches []KVCache // one per layer
	pos    int       // position of the next token
}

// StepResult is what one decoding step computes.
type StepResult struct {
	Pos    int       // the token's original position
	Logits []float64 // next-token logits, length vocab
	// Routed[l] reports whether the token went through layer l's routed
	// computation (true for dense layers).
	Routed []bool
	// RouterWeights[l] is r at layer l (NaN for dense layers).
	RouterWeights []float64
	// PredictorLogits[l] is q at layer l (NaN where the layer has no predictor).
	PredictorLogits []float64
	Hidden          []float64 // residual stream after the last layer
}

// NewDecoder checks that every routed layer can decode causally: Causal is
// router or predictor, Router is not random (its noise is a training input)
// and Jitter is 0 (jitter is training-only). Validate already rejects softmax
// weighting and dense compute in causal mode.
func NewDecoder(c spec.ModelConfig, p *ModelParams) (*Decoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := p.Check(c); err != nil {
		return nil, fmt.Errorf("decoder %w", err)
	}
	for l, ml := range c.Layers {
		if !ml.Routed {
			continue
		}
		switch {
		case ml.Config.Causal == spec.CausalOff:
			return nil, fmt.Errorf("decoder: layer %d has Causal = off; top-k over the row is not causal, set Causal = router or predictor (docs/spec.md §9)", l)
		case ml.Config.Router == spec.RouterRandom:
			return nil, fmt.Errorf("decoder: layer %d has Router = random; its noise is a training input, decoding needs a deterministic router", l)
		case ml.Config.Jitter != 0:
			return nil, fmt.Errorf("decoder: layer %d has Jitter = %v; jitter is training-only, set it to 0 for decoding", l, ml.Config.Jitter)
		}
	}
	return &Decoder{cfg: c, p: p, Caches: make([]KVCache, len(c.Layers))}, nil
}

// Step feeds the next token and returns its logits. Each routed layer
// routes the token iff r > 0 (Causal = router) or q > 0 (Causal =
// predictor), from the token's own residual stream only; a routed token is
// appended to that layer's cache with its original position and updated as
// x + g f, a skipped token keeps x and is never cached by that layer.
func (dec *Decoder) Step(token int) (*StepResult, error) {
	if token < 0 || token >= dec.cfg.Vocab {
		return nil, fmt.Errorf("decoder: token %d at position %d, want 0 <= id < vocab = %d", token, dec.pos, dec.cfg.Vocab)
	}
	blk := dec.cfg.Block()
	if blk.Positions == spec.PositionLearned && dec.pos >= dec.cfg.MaxLen {
		return nil, fmt.Errorf("decoder: position %d has no learned position embedding (MaxLen = %d)", dec.pos, dec.cfg.MaxLen)
	}
	nl := len(dec.cfg.Layers)
	res := &StepResult{Pos: dec.pos, Routed: make([]bool, nl), RouterWeights: make([]float64, nl), PredictorLogits: make([]float64, nl)}
	x := EmbedToken(dec.p, token, dec.pos)
	for l, ml := range dec.cfg.Layers {
		lp := dec.p.Layers[l]
		kv := &dec.Caches[l]
		res.RouterWeights[l], res.PredictorLogits[l] = math.NaN(), math.NaN()
		if !ml.Routed {
			res.Routed[l] = true
			f := kv.BlockStep(blk, &lp.Block, x, dec.pos)
			for j := range x {
				x[j] += f[j]
			}
			continue
		}
		cfg := ml.Config
		r := routerWeight(cfg, lp, x)
		res.RouterWeights[l] = r
		score := r
		if cfg.HasPredictor() {
			res.PredictorLogits[l] = PredictorLogit(lp, x)
			if cfg.Causal == spec.CausalPredictor {
				score = res.PredictorLogits[l]
			}
		}
		if math.IsNaN(score) {
			return nil, fmt.Errorf("decoder: causal routing score is NaN at layer %d, position %d", l, dec.pos)
		}
		routed := score > 0
		res.Routed[l] = routed
		g := causalWeight(cfg.Weighting, r)
		if cfg.MLPOnly {
			a := kv.AttentionStep(blk, &lp.Block, x, dec.pos)
			for j := range x {
				x[j] += a[j]
			}
			if routed {
				m := MLPUpdate(blk, &lp.Block, x)
				for j := range x {
					x[j] += float64(g * m[j])
				}
			}
			continue
		}
		if routed {
			f := kv.BlockStep(blk, &lp.Block, x, dec.pos)
			for j := range x {
				x[j] += float64(g * f[j])
			}
		}
	}
	res.Hidden = x
	res.Logits = HeadLogits(blk, dec.p, x)
	dec.pos++
	return res, nil
}

// routerWeight is r for one token (no noise, no jitter: NewDecoder rejects
// both).
func routerWeight(c spec.Config, p *LayerParams, x []float64) float64 {
	switch c.Router {
	case spec.RouterLinear:
		return RouterLinearWeight(p.Router, x)
	case spec.RouterLinearBias:
		return RouterLinearBiasWeight(p.Router, p.RouterBias[0], x)
	case spec.RouterL2Norm:
		return RouterL2NormWeight(x)
	}
	panic(fmt.Sprintf("ref: routerWeight with router %q (NewDecoder rejects it)", c.Router))
}

// causalWeight is g of docs/spec.md §6 for the causal weightings.
func causalWeight(w spec.Weighting, r float64) float64 {
	switch w {
	case spec.WeightRaw:
		return r
	case spec.WeightSigmoid:
		return Sigmoid(r)
	case spec.WeightNone:
		return 1
	}
	panic(fmt.Sprintf("ref: causalWeight with weighting %q (Validate rejects it in causal mode)", w))
}
