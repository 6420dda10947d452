package fuzzcase

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/spec"
)

// A step is one simplification of a configuration: it changes g in place
// and reports whether it applied.
type step struct {
	// what says what the step simplifies, in a reproducer's history.
	what  string
	apply func(g *golden.GenConfig) bool
	// fit ranks the step for Fit, which takes the gentlest reductions
	// first (half the sequence before a sequence of 1); 0 leaves it out.
	fit int
}

// sizeSteps are the steps that make a configuration smaller, largest
// reduction first: what Shrink tries first, and, in the order of their
// fit rank, what Fit applies until a configuration is within the bound on
// recomputation.
func sizeSteps(g *golden.GenConfig) []step {
	var out []step
	if n := len(g.Config.Layers); n > 1 {
		for l := n - 1; l >= 0; l-- {
			out = append(out, step{fmt.Sprintf("drop layer %d", l), func(g *golden.GenConfig) bool {
				g.Config.Layers = slices.Delete(g.Config.Layers, l, l+1)
				return true
			}, rank(l == n-1, 7)})
		}
	}
	s := g.Config.SeqLen
	for _, t := range slices.Compact([]int{1, s / 2, s * 3 / 4, s - s/8, s - 1}) {
		if t >= 1 && t < s {
			out = append(out, step{fmt.Sprintf("seq_len %d", t), func(g *golden.GenConfig) bool { return setSeqLen(g, t) }, rank(t == s/2, 1)})
		}
	}
	if b := g.Config.Batch; b > 1 {
		for row := range b {
			out = append(out, step{fmt.Sprintf("drop row %d", row), func(g *golden.GenConfig) bool {
				g.Config.Batch--
				if g.Config.ValidLengths != nil {
					g.Config.ValidLengths = slices.Delete(g.Config.ValidLengths, row, row+1)
				}
				return true
			}, rank(row == b-1, 6)})
		}
	}
	out = append(out,
		step{"fewer heads", func(g *golden.GenConfig) bool {
			return eachBlock(g, func(b *spec.BlockConfig) bool {
				if b.Heads == 1 || b.Norm == spec.NormLayer && b.D/b.Heads*(b.Heads-1) < MinLayerNormD {
					return false
				}
				b.D, b.Heads = b.D/b.Heads*(b.Heads-1), b.Heads-1
				if b.KVHeads > 0 && b.Heads%b.KVHeads != 0 {
					b.KVHeads = 0 // every head its own keys and values again
				}
				return true
			})
		}, 8},
		step{"narrower heads", func(g *golden.GenConfig) bool {
			return eachBlock(g, func(b *spec.BlockConfig) bool {
				if dh := b.D / b.Heads; dh > 2 && (b.Norm != spec.NormLayer || b.Heads*(dh/2+dh/2%2) >= MinLayerNormD) {
					b.D = b.Heads * (dh/2 + dh/2%2)
					return true
				}
				return false
			})
		}, 3},
		step{"narrower MLP", func(g *golden.GenConfig) bool {
			return eachBlock(g, func(b *spec.BlockConfig) bool {
				if b.DFF > 1 {
					b.DFF /= 2
					return true
				}
				return false
			})
		}, 2},
		step{"fewer experts", func(g *golden.GenConfig) bool {
			m := g.Config.MoDE
			if m == nil || m.Experts == 1 {
				return false
			}
			m.Experts--
			return true
		}, 4},
		step{"smaller vocabulary", func(g *golden.GenConfig) bool {
			if g.Config.Vocab <= 2 {
				return false
			}
			g.Config.Vocab = max(2, g.Config.Vocab/2)
			return true
		}, 5},
	)
	return out
}

// kindSteps are the steps that make a configuration a simpler kind of
// case, which Shrink tries before any other: a decode case becomes a model
// case of the same configuration (its full forward alone), and a model
// case a layer case of one of its routed layers, with the model's batch,
// sequence and padding (its input x then drawn as a layer case's, not
// embedded): a failure that one routed layer reproduces is reported on
// that layer, first in the order of the layers.
func kindSteps(g *golden.GenConfig) []step {
	switch g.Kind {
	case format.KindDecode:
		return []step{{"model case (the full forward, no decoding)", func(g *golden.GenConfig) bool {
			g.Kind = format.KindModel
			return true
		}, 0}}
	case format.KindModel:
		var out []step
		for l, ml := range g.Config.Layers {
			if !ml.Routed {
				continue
			}
			out = append(out, step{fmt.Sprintf("layer case of routed layer %d", l), func(g *golden.GenConfig) bool {
				layer := g.Config.Layers[l].Config
				g.Kind = format.KindLayer
				g.Config.Layer = &layer
				g.Config.Layers, g.Config.Vocab, g.Config.MaxLen = nil, 0, 0
				return true
			}, 0})
		}
		return out
	}
	return nil
}

// choiceSteps are the steps that make a configuration's choices simpler:
// each sets one choice of docs/spec.md to the paper's (or turns a feature
// off) in every routed layer.
func choiceSteps() []step {
	routing := func(what string, f func(c *spec.Config) bool) step {
		return step{what: what, apply: func(g *golden.GenConfig) bool { return eachRouted(g, f) }}
	}
	block := func(what string, f func(b *spec.BlockConfig) bool) step {
		return step{what: what, apply: func(g *golden.GenConfig) bool { return eachBlock(g, f) }}
	}
	return []step{
		{"no ties case", func(g *golden.GenConfig) bool { return change(&g.Ties, "") }, 0},
		{"no threshold", func(g *golden.GenConfig) bool { return change(&g.Threshold, false) }, 0},
		{"no padding", func(g *golden.GenConfig) bool {
			ok := g.Config.ValidLengths != nil
			g.Config.ValidLengths = nil
			return ok
		}, 0},
		routing("causal routing off", func(c *spec.Config) bool { return change(&c.Causal, spec.CausalOff) }),
		routing("no auxiliary objective", func(c *spec.Config) bool {
			w := change(&c.AuxWeight, 0)
			return change(&c.Aux, spec.AuxNone) || w
		}),
		routing("no load balancing", func(c *spec.Config) bool { return change(&c.LoadBalanceWeight, 0) }),
		routing("no jitter", func(c *spec.Config) bool { return change(&c.Jitter, 0) }),
		routing("linear router", func(c *spec.Config) bool { return change(&c.Router, spec.RouterLinear) }),
		routing("raw weighting", func(c *spec.Config) bool { return change(&c.Weighting, spec.WeightRaw) }),
		routing("gather compute", func(c *spec.Config) bool { return change(&c.Compute, spec.ComputeGather) }),
		routing("whole block routed", func(c *spec.Config) bool { return change(&c.MLPOnly, false) }),
		routing("default predictor width", func(c *spec.Config) bool { return change(&c.PredictorHidden, 0) }),
		block("no window", func(b *spec.BlockConfig) bool { return change(&b.Window, 0) }),
		block("every head its own keys and values", func(b *spec.BlockConfig) bool { return change(&b.KVHeads, 0) }),
		block("no q, k, v biases", func(b *spec.BlockConfig) bool { return change(&b.QKVBias, false) }),
		block("RoPE", func(b *spec.BlockConfig) bool { return change(&b.Positions, spec.PositionRoPE) }),
		block("RMSNorm", func(b *spec.BlockConfig) bool { return change(&b.Norm, spec.NormRMS) }),
		block("GELU", func(b *spec.BlockConfig) bool { return change(&b.MLP, spec.ActGELU) }),
		block("rope_base 10000", func(b *spec.BlockConfig) bool { return change(&b.RoPEBase, 10000) }),
		block("norm_eps 1e-6", func(b *spec.BlockConfig) bool { return change(&b.NormEps, 1e-6) }),
		{"every layer routed", func(g *golden.GenConfig) bool {
			ok := false
			for i := range g.Config.Layers {
				ok = change(&g.Config.Layers[i].Routed, true) || ok
			}
			return ok
		}, 0},
	}
}

// rank is r when ok, else 0.
func rank(ok bool, r int) int {
	if ok {
		return r
	}
	return 0
}

// change sets *p to v and reports whether it was different.
func change[T comparable](p *T, v T) bool {
	if *p == v {
		return false
	}
	*p = v
	return true
}

// setSeqLen sets the sequence length to s, clamping what depends on it:
// valid lengths, integer capacities, windows.
func setSeqLen(g *golden.GenConfig, s int) bool {
	c := &g.Config
	c.SeqLen = s
	for i := range c.ValidLengths {
		c.ValidLengths[i] = min(c.ValidLengths[i], s)
	}
	eachRouted(g, func(l *spec.Config) bool {
		if l.Capacity.Kind == spec.CapacityInteger {
			l.Capacity.Tokens = min(l.Capacity.Tokens, s)
		}
		return true
	})
	eachBlock(g, func(b *spec.BlockConfig) bool {
		b.Window = min(b.Window, s)
		return true
	})
	return true
}

// eachBlock applies f to every block of g (a model's layers share theirs,
// so f changes them alike) and reports whether it changed any.
func eachBlock(g *golden.GenConfig, f func(b *spec.BlockConfig) bool) bool {
	c := &g.Config
	switch {
	case c.Layer != nil:
		return f(&c.Layer.Block)
	case c.MoDE != nil:
		return f(&c.MoDE.Block)
	}
	ok := false
	for i := range c.Layers {
		ok = f(&c.Layers[i].Config.Block) || ok
	}
	return ok
}

// eachRouted applies f to every routed layer of g and reports whether it
// changed any.
func eachRouted(g *golden.GenConfig, f func(c *spec.Config) bool) bool {
	c := &g.Config
	if c.Layer != nil {
		return f(c.Layer)
	}
	ok := false
	for i := range c.Layers {
		if c.Layers[i].Routed {
			ok = f(&c.Layers[i].Config) || ok
		}
	}
	return ok
}

// clone returns a deep copy of g.
func clone(g *golden.GenConfig) *golden.GenConfig {
	raw, err := json.Marshal(g)
	if err != nil {
		panic(fmt.Sprintf("fuzzcase: a configuration does not encode: %v", err)) // a GenConfig always does
	}
	var out golden.GenConfig
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(fmt.Sprintf("fuzzcase: a configuration does not decode: %v", err))
	}
	return &out
}

// normalize lays base over g and reads the result as gen --config does:
// the configuration a step leads to, with the user's pinned part kept.
func normalize(g *golden.GenConfig, base map[string]any) (*golden.GenConfig, error) {
	v, err := Encode(g)
	if err != nil {
		return nil, err
	}
	return decode(Overlay(v, base))
}

// Fit returns g made small enough for golden.DecodeGenConfig's bound on
// recomputation: while it is too large, the first of these that the base
// leaves open and that gives a valid configuration is applied: half the
// sequence, half the MLP, narrower heads, fewer experts, a smaller
// vocabulary, one row fewer, one layer fewer, one head fewer. g itself is
// returned when it fits; an error when nothing the base leaves open makes
// it fit.
func Fit(g *golden.GenConfig, base map[string]any) (*golden.GenConfig, error) {
	for {
		_, err := normalize(g, base)
		if err == nil {
			return g, nil
		}
		if !errors.Is(err, format.ErrTooLarge) {
			return nil, err
		}
		steps := slices.DeleteFunc(sizeSteps(g), func(s step) bool { return s.fit == 0 })
		slices.SortStableFunc(steps, func(a, b step) int { return a.fit - b.fit })
		next := (*golden.GenConfig)(nil)
		for _, s := range steps {
			c := clone(g)
			if !s.apply(c) {
				continue
			}
			v, _ := Encode(c)
			c2, err := undecoded(Overlay(v, base))
			if err != nil || reflect.DeepEqual(c2, g) {
				continue
			}
			next = c2
			break
		}
		if next == nil {
			return nil, fmt.Errorf("too large for the bound on recomputation, and what the base pins cannot be made smaller: %w", err)
		}
		g = next
	}
}

// undecoded reads v as a GenConfig without validating it: a step towards
// a configuration that fits may pass through one that does not.
func undecoded(v map[string]any) (*golden.GenConfig, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var g golden.GenConfig
	return &g, json.Unmarshal(raw, &g)
}

// Shrunk is the result of Shrink: the smallest failing configuration found
// and the steps that led to it.
type Shrunk struct {
	Config *golden.GenConfig
	// Steps lists the simplifications kept, in order.
	Steps []string
	// Tried counts the configurations run.
	Tried int
}

// Shrink simplifies the failing configuration g while it still fails:
// it tries every kind step (a simpler kind of case), then every size step,
// then every choice step, keeps the first whose
// configuration fails (fails reports it; an error counts as not failing)
// and starts again from it, until no step fails or maxTries
// configurations have been run. The base's pinned part is kept in every
// configuration tried, and each keeps g's name and seed.
func Shrink(g *golden.GenConfig, base map[string]any, maxTries int, fails func(*golden.GenConfig) bool) Shrunk {
	out := Shrunk{Config: g}
	seen := map[string]bool{key(g): true}
	for out.Tried < maxTries {
		progressed := false
		steps := slices.Concat(kindSteps(out.Config), sizeSteps(out.Config), choiceSteps())
		for _, s := range steps {
			c := clone(out.Config)
			if !s.apply(c) {
				continue
			}
			n, err := normalize(c, base)
			if err != nil || seen[key(n)] {
				continue
			}
			seen[key(n)] = true
			out.Tried++
			if fails(n) {
				out.Config = n
				out.Steps = append(out.Steps, s.what)
				progressed = true
				break
			}
			if out.Tried >= maxTries {
				break
			}
		}
		if !progressed {
			break
		}
	}
	return out
}

// key identifies a configuration.
func key(g *golden.GenConfig) string {
	raw, _ := json.Marshal(g)
	return string(raw)
}

// Size describes g in a line: kind, batch, sequence length (and the valid
// lengths), width, heads, head width and MLP width, then every other size
// and choice that is not its default (docs/spec.md's, spec.DefaultConfig's),
// so that a shrunk case shows what it still needs: kv_heads=2 for a
// grouped-query case, the capacity rule, a model's layers and vocabulary,
// a MoDE layer's experts. A model whose routed layers choose differently
// lists each one's choices as L<l>{...}.
func Size(g *golden.GenConfig) string {
	c := g.Config
	var b spec.BlockConfig
	var extra []string
	switch {
	case c.Layer != nil:
		b = c.Layer.Block
		extra = routingChoices(*c.Layer)
	case c.MoDE != nil:
		b = c.MoDE.Block
		m := c.MoDE
		extra = []string{fmt.Sprintf("form=%s experts=%d", m.Form, m.Experts)}
		if m.NoOpExperts != 0 {
			extra = append(extra, fmt.Sprintf("noop_experts=%d", m.NoOpExperts))
		}
		if m.Capacity != 0 {
			extra = append(extra, fmt.Sprintf("capacity=%g", m.Capacity))
		}
		extra = append(extra, fmt.Sprintf("expert_capacity=%g", m.ExpertCapacity))
	case len(c.Layers) > 0:
		b = c.Layers[0].Config.Block
		extra = modelChoices(c)
	}
	valid := ""
	if c.ValidLengths != nil {
		valid = fmt.Sprintf(" valid=%v", c.ValidLengths)
	}
	s := fmt.Sprintf("%s B=%d S=%d%s d=%d heads=%d d_h=%d d_ff=%d", g.Kind, c.Batch, c.SeqLen, valid, b.D, b.Heads, b.D/max(1, b.Heads), b.DFF)
	extra = append(blockChoices(b), extra...)
	if g.Precision != "" {
		extra = append(extra, "precision="+g.Precision)
	}
	if g.Ties != "" {
		extra = append(extra, "ties="+g.Ties)
	}
	if g.Threshold {
		extra = append(extra, "threshold")
	}
	if len(extra) > 0 {
		s += " " + strings.Join(extra, " ")
	}
	return s
}

// blockChoices lists the block's sizes and choices other than its width,
// heads and MLP width that are not spec.DefaultBlockConfig's, as key=value
// in the configuration's JSON names.
func blockChoices(b spec.BlockConfig) []string {
	def := spec.DefaultBlockConfig(b.D, b.Heads, b.DFF)
	var out []string
	add := func(differs bool, key string, v any) {
		if differs {
			out = append(out, fmt.Sprintf("%s=%v", key, v))
		}
	}
	add(b.KVHeadCount() != b.Heads, "kv_heads", b.KVHeads)
	add(b.QKVBias, "qkv_bias", b.QKVBias)
	add(b.Norm != def.Norm, "norm", b.Norm)
	add(b.NormEps != def.NormEps, "norm_eps", b.NormEps)
	add(b.MLP != def.MLP, "mlp", b.MLP)
	add(b.Positions != def.Positions, "positions", b.Positions)
	add(b.Positions == spec.PositionRoPE && b.RoPEBase != def.RoPEBase, "rope_base", b.RoPEBase)
	add(b.Window != 0, "window", b.Window)
	return out
}

// routingChoices lists a routed layer's capacity rule (which has no
// default) and every routing choice that is not spec.DefaultConfig's.
func routingChoices(l spec.Config) []string {
	def := spec.DefaultConfig(l.Block, l.Capacity.Ratio)
	cp := l.Capacity
	out := []string{"capacity=" + string(cp.Kind)}
	switch cp.Kind {
	case spec.CapacityInteger:
		out[0] += fmt.Sprintf(":%d", cp.Tokens)
	case spec.CapacityLog:
		out[0] += fmt.Sprintf(":%g,max_len=%d", cp.Ratio, cp.MaxLen)
	default:
		out[0] += fmt.Sprintf(":%g", cp.Ratio)
	}
	add := func(differs bool, key string, v any) {
		if differs {
			out = append(out, fmt.Sprintf("%s=%v", key, v))
		}
	}
	add(l.Router != def.Router, "router", l.Router)
	add(l.Jitter != 0, "jitter", l.Jitter)
	add(l.Weighting != def.Weighting, "weighting", l.Weighting)
	add(l.Compute != def.Compute, "compute", l.Compute)
	add(l.MLPOnly, "mlp_only", l.MLPOnly)
	add(l.Aux != def.Aux, "aux", l.Aux)
	add(l.AuxWeight != 0, "aux_weight", l.AuxWeight)
	add(l.LoadBalanceWeight != 0, "load_balance_weight", l.LoadBalanceWeight)
	add(l.HasPredictor() && l.PredictorWidth() != def.PredictorWidth(), "predictor_hidden", l.PredictorHidden)
	add(l.Causal != def.Causal, "causal", l.Causal)
	return out
}

// modelChoices lists a model's layers, vocabulary and learned positions,
// and its routed layers' choices: once when they all choose alike, else
// per layer.
func modelChoices(c format.CaseConfig) []string {
	var routed []int
	var choices []string
	for l, ml := range c.Layers {
		if ml.Routed {
			routed = append(routed, l)
			choices = append(choices, strings.Join(routingChoices(ml.Config), " "))
		}
	}
	out := []string{fmt.Sprintf("layers=%d routed=%v vocab=%d", len(c.Layers), routed, c.Vocab)}
	if c.MaxLen != 0 {
		out = append(out, fmt.Sprintf("max_len=%d", c.MaxLen))
	}
	switch {
	case len(choices) == 0:
	case slices.Equal(choices, slices.Repeat(choices[:1], len(choices))):
		out = append(out, choices[0])
	default:
		for i, l := range routed {
			out = append(out, fmt.Sprintf("L%d{%s}", l, choices[i]))
		}
	}
	return out
}

// Signature names g's choices, without its sizes: the kind and, per
// routed layer, router, capacity rule, weighting, compute, MLP-only,
// auxiliary objective, causal routing, window and positions (a MoDE
// layer's form). Two configurations with one signature exercise the same
// code paths of an implementation; a run counts the signatures it
// covered.
func Signature(g *golden.GenConfig) string {
	c := g.Config
	parts := []string{g.Kind}
	if c.ValidLengths != nil {
		parts = append(parts, "padding")
	}
	layer := func(l spec.Config) string {
		s := fmt.Sprintf("%s/%s/%s/%s/%s", l.Router, l.Capacity.Kind, l.Weighting, l.Compute, l.Aux)
		if l.MLPOnly {
			s += "/mlp_only"
		}
		if l.Causal != spec.CausalOff {
			s += "/causal_" + string(l.Causal)
		}
		return s
	}
	var b spec.BlockConfig
	switch {
	case c.Layer != nil:
		b = c.Layer.Block
		parts = append(parts, layer(*c.Layer))
	case c.MoDE != nil:
		b = c.MoDE.Block
		parts = append(parts, string(c.MoDE.Form))
	default:
		for _, l := range c.Layers {
			b = l.Config.Block
			if l.Routed {
				parts = append(parts, layer(l.Config))
			} else {
				parts = append(parts, "dense")
			}
		}
	}
	parts = append(parts, string(b.Positions), string(b.Norm), string(b.MLP))
	if b.Window > 0 {
		parts = append(parts, "window")
	}
	return strings.Join(parts, " ")
}
