package fuzz

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// maxDecodeLen bounds a decoded sequence: each step re-runs the full
// forward of the prefix, so the cost of a run grows with its square.
const maxDecodeLen = 10

// genCausalModel draws a small causal-routing model (docs/spec.md §9):
// 1 to 3 layers in a drawn pattern, router or predictor routing, raw,
// sigmoid or none weighting, optionally MLP-only, RoPE or learned positions.
func genCausalModel(src Source) (spec.ModelConfig, *ref.ModelParams, error) {
	blk := genBlock(src)
	routing := spec.Config{Block: blk, Router: []spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm}[src.Int(0, 2, "router")],
		// Ratio or log capacity with S_max >= every prefix: causal routing
		// ignores the capacity, but ref's full forward still computes the
		// auxiliary targets under it, and an integer C would reject the
		// prefixes shorter than C.
		Capacity:  spec.Capacity{Kind: spec.CapacityRatio, Ratio: src.Pick(ratios, "c")},
		Weighting: []spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightNone}[src.Int(0, 2, "weighting")],
		Compute:   spec.ComputeGather, MLPOnly: src.Int(0, 3, "mlp only") == 0,
		Aux:    spec.AuxNone,
		Causal: []spec.CausalRouting{spec.CausalRouter, spec.CausalPredictor}[src.Int(0, 1, "causal")],
	}
	if src.Int(0, 1, "log capacity") == 1 {
		routing.Capacity = spec.Capacity{Kind: spec.CapacityLog, Ratio: routing.Capacity.Ratio, MaxLen: maxDecodeLen}
	}
	n := src.Int(1, 3, "layers")
	pattern := []spec.Pattern{
		{Kind: spec.PatternAll},
		{Kind: spec.PatternEveryOther},
		{Kind: spec.PatternDenseEnds, DenseStart: min(1, n-1)},
	}[src.Int(0, 2, "pattern")]
	maxLen := 0
	if blk.Positions == spec.PositionLearned {
		maxLen = src.Int(2, maxDecodeLen, "max len")
	}
	mc, err := spec.NewModelConfig(src.Int(2, 12, "vocab"), maxLen, n, routing, pattern, nil)
	if err != nil {
		return spec.ModelConfig{}, nil, err
	}
	return mc, ref.NewModelParams(mc, src.Uint64("seed")), nil
}

var decodeCount struct{ steps, routed, skipped, resets, limits, longest int }

// decoderSM is docs/spec.md §9 as a state machine: decoding token by
// token with per-layer caches equals the full-sequence causal forward of
// the prefix, bit for bit (logits and per-layer routing), after every
// appended token and across new sequences.
func decoderSM(impl Impl) func(*rapid.T) {
	return func(t *rapid.T) {
		mc, mp, err := genCausalModel(rapidSource{t})
		if err != nil {
			t.Fatalf("model config: %v", err)
		}
		dec, err := impl.NewDecoder(mc, mp)
		if err != nil {
			t.Fatalf("%s: NewDecoder: %v", impl.Name, err)
		}
		var tokens []int
		var steps []*ref.StepResult
		limit := maxDecodeLen
		if mc.MaxLen > 0 {
			limit = mc.MaxLen
		}
		appendToken := func(t *rapid.T) {
			tok := rapid.IntRange(0, mc.Vocab-1).Draw(t, "token")
			if len(tokens) == limit {
				if mc.MaxLen > 0 {
					// Past the learned position embeddings: an error.
					if _, err := dec.Step(tok); err == nil {
						t.Fatalf("%s: Step at position %d accepted with MaxLen = %d learned positions", impl.Name, len(tokens), mc.MaxLen)
					}
					decodeCount.limits++
					dec, _ = impl.NewDecoder(mc, mp)
					tokens, steps = nil, nil
					return
				}
				t.Skip("skipped because the sequence is at maxDecodeLen")
			}
			st, err := dec.Step(tok)
			if err != nil {
				t.Fatalf("%s: Step(%d) at position %d: %v", impl.Name, tok, len(tokens), err)
			}
			tokens = append(tokens, tok)
			steps = append(steps, st)
			decodeCount.steps++
			decodeCount.longest = max(decodeCount.longest, len(tokens))
			if err := compareDecode(impl, mc, mp, tokens, steps); err != nil {
				t.Fatalf("%v", err)
			}
		}
		// Three names for appending make it three times as likely as
		// starting over, so that sequences grow to several tokens.
		t.Repeat(map[string]func(*rapid.T){
			"append":         appendToken,
			"append again":   appendToken,
			"append a third": appendToken,
			"new sequence": func(t *rapid.T) {
				dec, err = impl.NewDecoder(mc, mp)
				if err != nil {
					t.Fatalf("%s: NewDecoder: %v", impl.Name, err)
				}
				tokens, steps = nil, nil
				decodeCount.resets++
			},
			"": func(t *rapid.T) {
				if len(tokens) != len(steps) {
					t.Fatalf("state: %d tokens, %d steps", len(tokens), len(steps))
				}
			},
		})
	}
}

// compareDecode checks every step's logits and routing against the full
// forward of tokens. The comparison is bit for bit for every
// implementation, mod included: mod's decoder is compared with mod's own
// full forward (impl.Model), never with ref's, and over the rapid runs and
// 30 s of fuzzing its logits and routing never differed in a single bit
// (mod's own decode test allows 2e-6 of the scale for a matrix kernel
// that might sum in a shape-dependent order; none does here).
func compareDecode(impl Impl, mc spec.ModelConfig, mp *ref.ModelParams, tokens []int, steps []*ref.StepResult) error {
	tg := make([]int, len(tokens))
	for i := range tg {
		tg[i] = ref.IgnoreTarget
	}
	full, err := impl.Model(mc, mp, ref.ModelInputs{Tokens: [][]int{tokens}, Targets: [][]int{tg}})
	if err != nil {
		return fmt.Errorf("%s: full forward of %v: %v", impl.Name, tokens, err)
	}
	for i, st := range steps {
		for l, ml := range mc.Layers {
			if !ml.Routed {
				continue
			}
			want := isSelected(full.Layers[l].Selection, 0, i)
			if st.Routed[l] != want {
				return fmt.Errorf("%s: tokens %v: position %d layer %d routed = %v when decoding, %v in the full causal forward", impl.Name, tokens, i, l, st.Routed[l], want)
			}
			if want {
				decodeCount.routed++
			} else {
				decodeCount.skipped++
			}
		}
		row := full.Logits[0].RawRowView(i)
		for v := range row {
			if !same(st.Logits[v], row[v]) {
				return fmt.Errorf("%s: tokens %v: position %d logit %d = %v when decoding, %v in the full causal forward (difference %.3g)",
					impl.Name, tokens, i, v, st.Logits[v], row[v], st.Logits[v]-row[v])
			}
		}
	}
	return nil
}

// routingOffAtInference is the deviation of docs/spec.md §11 "routing
// disabled at inference": its decoder runs every layer densely.
var routingOffAtInference = Impl{
	Name:  "ref decoding with routing disabled",
	Model: ref.ModelForward,
	NewDecoder: func(c spec.ModelConfig, p *ref.ModelParams) (Stepper, error) {
		dense := spec.ModelConfig{Vocab: c.Vocab, MaxLen: c.MaxLen}
		dp := *p
		dp.Layers = nil
		for l, ml := range c.Layers {
			dense.Layers = append(dense.Layers, spec.ModelLayer{Config: ml.Config})
			dp.Layers = append(dp.Layers, &ref.LayerParams{Block: p.Layers[l].Block})
		}
		d, err := ref.NewDecoder(dense, &dp)
		if err != nil {
			return nil, err
		}
		return d, nil
	},
}

// TestDecoderPropertyCatchesDisabledRouting shows that the comparison the
// state machine makes fails for a decoder that ignores routing.
func TestDecoderPropertyCatchesDisabledRouting(t *testing.T) {
	for k := range 50 {
		mc, mp, err := genCausalModel(&byteSource{data: seedBytes(uint64(5000+k), 128)})
		if err != nil {
			t.Fatal(err)
		}
		dec, err := routingOffAtInference.NewDecoder(mc, mp)
		if err != nil {
			t.Fatal(err)
		}
		var tokens []int
		var steps []*ref.StepResult
		for i := range 6 {
			tok := (i*7 + k) % mc.Vocab
			st, err := dec.Step(tok)
			if err != nil {
				break // past MaxLen learned positions
			}
			tokens, steps = append(tokens, tok), append(steps, st)
			if err := compareDecode(routingOffAtInference, mc, mp, tokens, steps); err != nil {
				t.Logf("caught on model %d: %v", k, err)
				return
			}
		}
	}
	t.Fatal("decoding with routing disabled matched the full causal forward on 50 models: the decoding property could not fail")
}

func TestDecoderMatchesFullForward(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			decodeCount = struct{ steps, routed, skipped, resets, limits, longest int }{}
			rapid.Check(t, decoderSM(impl))
			t.Logf("%s: %+v", impl.Name, decodeCount)
			if decodeCount.routed == 0 || decodeCount.skipped == 0 || decodeCount.resets == 0 || decodeCount.longest < 5 {
				t.Fatalf("%s: the state machine did not exercise routed and skipped tokens and new sequences: %s", impl.Name, fmt.Sprintf("%+v", decodeCount))
			}
		})
	}
}

// FuzzDecoder runs the state machine on each implementation, each driven by
// the same fuzz input.
func FuzzDecoder(f *testing.F) {
	sms := make([]func(*testing.T, []byte), len(Impls))
	for k, impl := range Impls {
		sms[k] = rapid.MakeFuzz(decoderSM(impl))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, sm := range sms {
			sm(t, data)
		}
	})
}
