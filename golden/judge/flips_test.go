package judge

import (
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
)

func TestFlipLimit(t *testing.T) {
	for _, c := range []struct{ d, want int }{{0, 1}, {1, 2}, {2, 3}, {4, 5}, {16, 14}, {100, 65}, {10000, 5150}} {
		if got := FlipLimit(c.d); got != c.want {
			t.Errorf("FlipLimit(%d) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestJudgeFlipsTooMany: with every decision of layer-paper inside a wide
// margin, swapping one selected token per row for an unselected one is
// rejudged, and swapping all of them is too many flips.
func TestJudgeFlipsTooMany(t *testing.T) {
	c, err := format.Load("../corpus", "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	m := *c.Manifest
	m.Routing.Margin = 100
	wide := &format.Case{Manifest: &m, Arrays: c.Arrays}
	sel := c.Arrays["expected.selected"]
	k, s := sel.Shape[1], c.Manifest.Config.SeqLen
	swap := func(n int) *CaseResult {
		t.Helper()
		cand := expectedAsCandidate(c)
		got := cand["selected"]
		for b := range sel.Shape[0] {
			row := got.I[b*k : (b+1)*k]
			var out []int64
			for p := range s {
				if !slices.Contains(sel.I[b*k:(b+1)*k], int64(p)) {
					out = append(out, int64(p))
				}
			}
			copy(row[:n], out[:n])
			slices.Sort(row)
		}
		res, err := Compare(wide, cand, false)
		if err != nil {
			t.Fatal(err)
		}
		if res, err = JudgeFlips(wide, cand, res, false); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := swap(1); r.Flips == nil || r.Flips.Verdict != FlipsRejudged || r.Flips.Count != 4 || r.Flips.NearTies != 2*s {
		t.Errorf("one swap per row: flips %+v, want 4 flips rejudged among %d near-ties", r.Flips, 2*s)
	}
	if r := swap(k); r.Pass || r.Flips.Verdict != FlipsTooMany || r.Flips.Count != 4*k || r.Flips.Limit != FlipLimit(2*s) {
		t.Errorf("every token swapped: pass %v, flips %+v, want too many", r.Pass, r.Flips)
	}
}

// TestFrozenTruthAtTheTruthsDecisions: recomputing a case at its own
// decisions, layer by layer as JudgeFlips does for a candidate's, gives
// the case's arrays bit for bit, for every layer and model case of the
// corpus (the per-layer inputs rebuilt from Embed and the layers in order
// are the model forward's).
func TestFrozenTruthAtTheTruthsDecisions(t *testing.T) {
	names, err := format.List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		c, err := format.Load("../corpus", name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Manifest.Kind != format.KindLayer && c.Manifest.Kind != format.KindModel {
			continue
		}
		n++
		fc, err := frozenTruth(c, expectedAsCandidate(c))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, info := range c.Manifest.Arrays {
			if a, b := c.Arrays[info.Name], fc.Arrays[info.Name]; !slices.Equal(a.F, b.F) || !slices.Equal(a.I, b.I) {
				t.Errorf("%s: %s differs when recomputed at the case's own decisions", name, info.Name)
			}
		}
	}
	if n < 40 {
		t.Errorf("compared %d cases, want the corpus's 40 or more layer and model cases", n)
	}
}

// TestJudgeFlipsInLayerOrder: a flip in a model's first routed layer is
// re-judged against a truth in which the later routed layers see the inputs
// the flip moved: the first layer's router logits (its own input) stay, a
// later layer's move.
func TestJudgeFlipsInLayerOrder(t *testing.T) {
	c, err := format.Load("../corpus", "model-every-other")
	if err != nil {
		t.Fatal(err)
	}
	m := *c.Manifest
	m.Routing.Margin = 100
	wide := &format.Case{Manifest: &m, Arrays: c.Arrays}
	cand := expectedAsCandidate(c)
	sel := cand["L0.selected"]
	k := sel.Shape[1]
	for p := range c.Manifest.Config.SeqLen {
		if !slices.Contains(sel.I[:k], int64(p)) {
			sel.I[0] = int64(p)
			break
		}
	}
	slices.Sort(sel.I[:k])
	res, err := Compare(wide, cand, false)
	if err != nil {
		t.Fatal(err)
	}
	if res, err = JudgeFlips(wide, cand, res, false); err != nil {
		t.Fatal(err)
	}
	if res.Flips == nil || res.Flips.Verdict != FlipsRejudged || res.Flips.Flips[0].Layer != 0 || res.Flips.Count != 2 {
		t.Fatalf("flips %+v, want 2 in layer 0, rejudged", res.Flips)
	}
	fc, err := frozenTruth(wide, cand)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fc.Arrays["expected.L0.router_logits"].F, c.Arrays["expected.L0.router_logits"].F) {
		t.Error("layer 0's router logits moved with its own decision")
	}
	if slices.Equal(fc.Arrays["expected.L2.router_logits"].F, c.Arrays["expected.L2.router_logits"].F) {
		t.Error("layer 2's router logits did not move with layer 0's decision")
	}
	if res.Pass {
		t.Error("the truth's values passed at the candidate's other decisions")
	}
}
