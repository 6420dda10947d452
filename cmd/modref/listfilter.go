package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/spec"
)

// caseFilters are the flags of `modref list` that select cases by what
// they hold, each with the values a case holds for it: the kind, and the
// choices of docs/spec.md in any of its routed layers (or its MoDE layer).
var caseFilters = []struct {
	name, usage string
	values      func(m *format.Manifest) []string
}{
	{"kind", "layer, model, decode or mode", func(m *format.Manifest) []string { return []string{string(m.Kind)} }},
	{"router", "a routed layer's router (docs/spec.md §2)", routedValues(func(c spec.Config) string { return string(c.Router) })},
	{"capacity", "a routed layer's capacity rule (§3)", routedValues(func(c spec.Config) string { return string(c.Capacity.Kind) })},
	{"weighting", "a routed layer's weighting (§6)", routedValues(func(c spec.Config) string { return string(c.Weighting) })},
	{"compute", "a routed layer's compute, gather or dense (§5, §7)", routedValues(func(c spec.Config) string { return string(c.Compute) })},
	{"aux", "a routed layer's auxiliary objective (§8)", routedValues(func(c spec.Config) string { return string(c.Aux) })},
	{"causal", "a routed layer's causal routing (§9)", routedValues(func(c spec.Config) string { return string(c.Causal) })},
	{"mlp", "a block's MLP", blockValues(func(b spec.BlockConfig) string { return string(b.MLP) })},
	{"norm", "a block's norm", blockValues(func(b spec.BlockConfig) string { return string(b.Norm) })},
	{"positions", "a block's positions", blockValues(func(b spec.BlockConfig) string { return string(b.Positions) })},
	{"attention", "a block's attention: multi_head, grouped_query (kv_heads < heads) or multi_query (kv_heads = 1 < heads) (§5)", blockValues(attentionOf)},
	{"qkv-bias", "a block's biases on q, k and v, true or false (§5)", blockValues(func(b spec.BlockConfig) string { return fmt.Sprint(b.QKVBias) })},
	{"pattern", "a model's routed layers: all, every_other (0, 2, ...), dense or list", func(m *format.Manifest) []string {
		if len(m.Config.Layers) == 0 {
			return nil
		}
		return []string{patternOf(m.Config.Layers)}
	}},
}

// routedValues returns the values of field over a case's routed layers.
func routedValues(field func(spec.Config) string) func(*format.Manifest) []string {
	return func(m *format.Manifest) []string {
		var out []string
		if m.Config.Layer != nil {
			out = append(out, field(*m.Config.Layer))
		}
		for _, l := range m.Config.Layers {
			if l.Routed {
				out = append(out, field(l.Config))
			}
		}
		return out
	}
}

// blockValues returns the values of field over a case's blocks.
func blockValues(field func(spec.BlockConfig) string) func(*format.Manifest) []string {
	return func(m *format.Manifest) []string {
		var out []string
		if m.Config.Layer != nil {
			out = append(out, field(m.Config.Layer.Block))
		}
		if m.Config.MoDE != nil {
			out = append(out, field(m.Config.MoDE.Block))
		}
		for _, l := range m.Config.Layers {
			out = append(out, field(l.Config.Block))
		}
		return out
	}
}

// attentionOf names a block's attention by its key and value heads
// (docs/spec.md §5): multi_head when every query head has its own,
// multi_query when one serves them all, grouped_query between.
func attentionOf(b spec.BlockConfig) string {
	switch kv := b.KVHeadCount(); {
	case kv == b.Heads:
		return "multi_head"
	case kv == 1:
		return "multi_query"
	}
	return "grouped_query"
}

// patternOf names the pattern of a model's routed layers, as docs/spec.md
// §10 names patterns: all, every_other (layers 0, 2, ...), or list; dense
// when no layer is routed.
func patternOf(layers []spec.ModelLayer) string {
	all, none, everyOther := true, true, len(layers) > 1
	for i, l := range layers {
		all = all && l.Routed
		none = none && !l.Routed
		everyOther = everyOther && l.Routed == (i%2 == 0)
	}
	switch {
	case all:
		return string(spec.PatternAll)
	case none:
		return "dense"
	case everyOther:
		return string(spec.PatternEveryOther)
	}
	return string(spec.PatternList)
}

// filterCases keeps the cases (names, with their manifests) that hold every
// value want names (filter name → value). A filter that keeps no case is an
// error listing the values the cases hold for it, so that a typo is not an
// empty list.
func filterCases(names []string, manifests map[string]*format.Manifest, want map[string]string) ([]string, error) {
	for _, f := range caseFilters {
		v, ok := want[f.name]
		if !ok {
			continue
		}
		seen := map[string]bool{}
		var kept []string
		for _, name := range names {
			vals := f.values(manifests[name])
			for _, x := range vals {
				seen[x] = true
			}
			if slices.Contains(vals, v) {
				kept = append(kept, name)
			}
		}
		if len(kept) == 0 {
			held := make([]string, 0, len(seen))
			for x := range seen {
				held = append(held, x)
			}
			sort.Strings(held)
			return nil, fmt.Errorf("no case selected holds --%s %s; the cases hold %s", f.name, v, orNone(held))
		}
		names = kept
	}
	return names, nil
}

func orNone(vals []string) string {
	if len(vals) == 0 {
		return "none"
	}
	return strings.Join(vals, ", ")
}
