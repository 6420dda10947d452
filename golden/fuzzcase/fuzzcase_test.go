package fuzzcase

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/spec"
)

func TestDrawIsDeterministic(t *testing.T) {
	sp := Space{MaxSeq: 128}
	for i := range 50 {
		a, err := Draw(7, i, 0, sp)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Draw(7, i, 0, sp)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("case %d drawn twice differs:\n%+v\n%+v", i, a, b)
		}
		if c, _ := Draw(7, i, 1, sp); reflect.DeepEqual(a, c) {
			t.Errorf("case %d: attempt 1 draws attempt 0's configuration again", i)
		}
	}
	a, _ := Draw(7, 3, 0, sp)
	if b, _ := Draw(8, 3, 0, sp); reflect.DeepEqual(a.Config, b.Config) {
		t.Error("seeds 7 and 8 draw the same case 3")
	}
}

// TestDrawCoversTheSpec: over a few thousand draws every choice of
// docs/spec.md appears, and sizes from 1 to MaxSeq, odd and even, and
// head widths from 2 to 128.
func TestDrawCoversTheSpec(t *testing.T) {
	seen := map[string]bool{}
	mark := func(k string, v any) { seen[k+"="+strings.Trim(jsonOf(v), `"`)] = true }
	routing := func(l spec.Config) {
		mark("router", l.Router)
		mark("capacity", l.Capacity.Kind)
		mark("weighting", l.Weighting)
		mark("compute", l.Compute)
		mark("mlp_only", l.MLPOnly)
		mark("aux", l.Aux)
		mark("causal", l.Causal)
		mark("jitter", l.Jitter > 0)
		mark("load_balance", l.LoadBalanceWeight > 0)
	}
	block := func(b spec.BlockConfig) {
		mark("norm", b.Norm)
		if b.Norm == spec.NormLayer && b.D < MinLayerNormD {
			t.Errorf("a draw normalises %d features by LayerNorm, below %d: ill conditioned by construction", b.D, MinLayerNormD)
		}
		mark("mlp", b.MLP)
		mark("positions", b.Positions)
		mark("window", b.Window > 0)
		mark("wide head", b.D/b.Heads > 32)
		mark("grouped heads", b.KVHeadCount() < b.Heads)
		mark("qkv_bias", b.QKVBias)
	}
	maxS := 0
	for i := range 3000 {
		g, err := Draw(1, i, 0, Space{MaxSeq: 256})
		if err != nil {
			t.Fatal(err)
		}
		c := g.Config
		mark("kind", g.Kind)
		mark("padding", c.ValidLengths != nil)
		mark("odd S", c.SeqLen%2 == 1)
		maxS = max(maxS, c.SeqLen)
		switch {
		case c.Layer != nil:
			routing(*c.Layer)
			block(c.Layer.Block)
		case c.MoDE != nil:
			mark("form", c.MoDE.Form)
			block(c.MoDE.Block)
		default:
			routed, differ := 0, false
			for _, l := range c.Layers {
				if l.Routed {
					routing(l.Config)
					routed++
					differ = differ || l.Config != c.Layers[0].Config
				}
			}
			block(c.Layers[0].Config.Block)
			mark("dense layers", routed < len(c.Layers))
			mark("layers routed apart", differ)
		}
	}
	for _, want := range []string{
		"kind=layer", "kind=model", "kind=decode", "kind=mode", "form=staged", "form=integrated",
		"router=linear", "router=linear_bias", "router=l2norm", "router=random", "jitter=true",
		"capacity=ratio", "capacity=integer", "capacity=log",
		"weighting=raw", "weighting=sigmoid", "weighting=softmax", "weighting=none",
		"compute=gather", "compute=dense", "mlp_only=true", "aux=none", "aux=router_bce", "aux=predictor", "load_balance=true",
		"causal=off", "causal=router", "causal=predictor", "norm=rmsnorm", "norm=layernorm", "mlp=gelu", "mlp=swiglu",
		"positions=rope", "positions=learned", "window=true", "window=false", "padding=true", "odd S=true", "odd S=false",
		"dense layers=true", "layers routed apart=true", "wide head=true", "grouped heads=true", "qkv_bias=true",
	} {
		if !seen[want] {
			t.Errorf("no draw has %s", want)
		}
	}
	if maxS < 200 {
		t.Errorf("the longest sequence drawn is %d, want near --max-seq 256", maxS)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBasePins: what the base pins holds in every draw, and the rest is
// drawn.
func TestBasePins(t *testing.T) {
	base, err := DecodeObject([]byte(`{"kind": "model", "config": {"seq_len": 9, "layers": [{"routed": true, "layer": {"router": "linear", "weighting": "sigmoid"}}, {"routed": false}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	computes := map[spec.Compute]bool{}
	for i := range 200 {
		g, err := Draw(3, i, 0, Space{MaxSeq: 64, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		c := g.Config
		if g.Kind != format.KindModel || c.SeqLen != 9 || len(c.Layers) != 2 || !c.Layers[0].Routed || c.Layers[1].Routed ||
			c.Layers[0].Config.Router != spec.RouterLinear || c.Layers[0].Config.Weighting != spec.WeightSigmoid {
			t.Fatalf("draw %d does not hold the base: %s", i, jsonOf(g))
		}
		computes[c.Layers[0].Config.Compute] = true
	}
	if len(computes) != 2 {
		t.Errorf("computes drawn %v, want both: the base leaves compute open", computes)
	}
	for _, bad := range []string{
		`{"config": {"layer": {"routr": "linear"}}}`,                         // a field gen does not know
		`{"kind": "layer", "config": {"layer": {"heads": 3, "d_model": 8}}}`, // a width that does not divide
	} {
		b, err := DecodeObject([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Draw(1, 0, 0, Space{MaxSeq: 16, Base: b}); !errors.Is(err, ErrNoDraw) {
			t.Errorf("base %s: %v, want ErrNoDraw", bad, err)
		}
	}
	if _, err := DecodeObject([]byte(`{} {}`)); err == nil {
		t.Error("two objects read as one base")
	}
}

// TestFit: a configuration too large for the bound on recomputation is
// made smaller until it fits, keeping what the base pins.
func TestFit(t *testing.T) {
	base, _ := DecodeObject([]byte(`{"kind": "layer", "config": {"seq_len": 40, "layer": {"d_model": 16, "heads": 1}}}`))
	for i := range 20 {
		g, err := Draw(5, i, 0, Space{MaxSeq: 64, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		if g.Config.SeqLen != 40 || g.Config.Layer.Block.D != 16 {
			t.Fatalf("fitted away a pinned size: %s", Size(g))
		}
		if _, err := golden.DecodeGenConfig([]byte(jsonOf(g))); err != nil {
			t.Fatalf("draw %d does not fit: %v", i, err)
		}
	}
	huge, _ := DecodeObject([]byte(`{"kind": "layer", "config": {"batch": 4, "seq_len": 4000, "layer": {"d_model": 4096, "heads": 4, "d_ff": 16384}}}`))
	if _, err := Draw(5, 0, 0, Space{MaxSeq: 4096, Base: huge}); !errors.Is(err, ErrNoDraw) || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a base pinning sizes beyond the bound: %v, want ErrNoDraw naming the bound", err)
	}
}

// TestShrink: a failure that needs a long sequence and a window shrinks to
// the shortest such sequence, one row, the smallest widths and the
// simplest choices, keeping the base.
func TestShrink(t *testing.T) {
	base, _ := DecodeObject([]byte(`{"kind": "layer", "config": {"layer": {"weighting": "softmax"}}}`))
	var g *golden.GenConfig
	fails := func(c *golden.GenConfig) bool { return c.Config.SeqLen > 20 && c.Config.Layer.Block.Window > 0 }
	for i := range 500 {
		d, err := Draw(11, i, 0, Space{MaxSeq: 128, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		if fails(d) && d.Config.Batch > 1 && d.Config.SeqLen > 40 {
			g = d
			break
		}
	}
	if g == nil {
		t.Fatal("no draw fails")
	}
	sh := Shrink(g, base, 500, fails)
	c := sh.Config.Config
	b := c.Layer.Block
	if c.SeqLen != 21 || c.Batch != 1 || b.Window < 1 || b.D != 2 || b.DFF != 1 || c.Layer.Weighting != spec.WeightSoftmax ||
		c.Layer.Router != spec.RouterLinear || b.Norm != spec.NormRMS || c.ValidLengths != nil {
		t.Errorf("shrunk %s to %s (%s), want S=21, B=1, d=2, d_ff=1, a window, linear router, RMSNorm, softmax kept; steps %v",
			Size(g), Size(sh.Config), jsonOf(sh.Config), sh.Steps)
	}
	if !fails(sh.Config) || sh.Config.Name != g.Name || sh.Config.Seed != g.Seed {
		t.Errorf("the shrunk configuration does not fail, or lost its name or seed: %s", jsonOf(sh.Config))
	}
	if len(sh.Steps) == 0 || sh.Tried < len(sh.Steps) {
		t.Errorf("steps %v of %d tried", sh.Steps, sh.Tried)
	}
	if s := Shrink(g, base, 3, fails); s.Tried > 3 {
		t.Errorf("tried %d configurations with a budget of 3", s.Tried)
	}
}

func TestSignature(t *testing.T) {
	a, _ := Draw(1, 0, 0, Space{MaxSeq: 64})
	b := clone(a)
	b.Config.SeqLen++
	if Signature(a) != Signature(b) {
		t.Errorf("sizes change the signature: %q, %q", Signature(a), Signature(b))
	}
}

// TestFitIsGentle: Fit halves a sequence too long for the bound rather
// than cutting it to one token.
func TestFitIsGentle(t *testing.T) {
	base, _ := DecodeObject([]byte(`{"kind": "layer", "config": {"batch": 1, "layer": {"d_model": 16, "heads": 1, "d_ff": 16}}}`))
	g, err := Draw(1, 0, 0, Space{MaxSeq: 8, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	// 2^20 tokens of width 16 are over golden's bounds on a case
	// (format.CheckBounds: the values it holds and the multiply-adds of
	// recomputing it); 2^13 fit.
	setSeqLen(g, 1<<20)
	got, err := Fit(g, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fitted to %s", Size(got))
	if s := got.Config.SeqLen; s < 1<<13 || s >= 1<<20 || got.Config.Layer.Block.D != 16 {
		t.Errorf("fitted S = 1048576 to %s, want the sequence halved until it fits (d kept)", Size(got))
	}
}

// TestShrinkKeepsLayerNormWide: a failure that needs LayerNorm shrinks its
// width to MinLayerNormD, not below, where LayerNorm is ill conditioned by
// construction (a shrunk reproducer must fail for the reason the draw did).
func TestShrinkKeepsLayerNormWide(t *testing.T) {
	base, _ := DecodeObject([]byte(`{"kind": "layer", "config": {"layer": {"norm": "layernorm"}}}`))
	fails := func(c *golden.GenConfig) bool { return c.Config.Layer.Block.Norm == spec.NormLayer }
	for i := range 20 {
		g, err := Draw(13, i, 0, Space{MaxSeq: 32, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		if b := g.Config.Layer.Block; b.D < MinLayerNormD {
			continue // pinned by the base: the user's own choice
		}
		sh := Shrink(g, base, 500, fails)
		if b := sh.Config.Config.Layer.Block; b.D < MinLayerNormD || b.D > 2*MinLayerNormD {
			t.Errorf("shrunk %s to %s, want LayerNorm over %d to %d features", Size(g), Size(sh.Config), MinLayerNormD, 2*MinLayerNormD)
		}
	}
}

// residualTwice is a Go candidate with a planted bug: every routed block
// returns its own residual, out = x + g·(x + f) (the case's arrays under
// diagnose's emulation of residual_twice, gradients included). fails
// reports whether it fails the case g generates, as modref fuzz judges a
// candidate.
func residualTwice(t *testing.T) func(g *golden.GenConfig) bool {
	return func(g *golden.GenConfig) bool {
		c, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
		if err != nil {
			return false
		}
		cand, err := diagnose.DeviantCandidate(c, "residual_twice", "")
		if err != nil {
			t.Fatalf("%s: %v", Size(g), err)
		}
		res, err := judge.Compare(c, cand, false)
		if err != nil {
			t.Fatalf("%s: %v", Size(g), err)
		}
		return !res.Pass
	}
}

// TestShrinkToALayerCase: a model case failed by a bug in its routed
// blocks (residualTwice) shrinks to a layer case of one of its routed
// layers, which still fails; a failure only a model shows (a predicate of
// this test's making) stays a model case, and a decode case's failure that
// its full forward shows becomes a model case.
func TestShrinkToALayerCase(t *testing.T) {
	fails := residualTwice(t)
	var g *golden.GenConfig
	for i := range 200 {
		d, err := Draw(21, i, 0, Space{MaxSeq: 12})
		if err != nil {
			t.Fatal(err)
		}
		routed := 0
		for _, l := range d.Config.Layers {
			if l.Routed {
				routed++
			}
		}
		if d.Kind == format.KindModel && routed >= 2 && fails(d) {
			g = d
			break
		}
	}
	if g == nil {
		t.Fatal("no model draw with two routed layers fails")
	}
	sh := Shrink(g, nil, 200, fails)
	if sh.Config.Kind != format.KindLayer || len(sh.Steps) == 0 || !strings.HasPrefix(sh.Steps[0], "layer case of routed layer ") || !fails(sh.Config) {
		t.Fatalf("shrunk %s to %s, steps %v: want a failing layer case, made one first", Size(g), Size(sh.Config), sh.Steps)
	}
	t.Logf("shrunk %s to %s: %v", Size(g), Size(sh.Config), sh.Steps)

	modelOnly := func(c *golden.GenConfig) bool { return c.Kind == format.KindModel }
	if sh := Shrink(g, nil, 200, modelOnly); sh.Config.Kind != format.KindModel {
		t.Errorf("a failure only a model shows shrunk to a %s case", sh.Config.Kind)
	}
	dec, err := Draw(21, 0, 0, Space{MaxSeq: 12, Base: map[string]any{"kind": format.KindDecode}})
	if err != nil {
		t.Fatal(err)
	}
	notLayer := func(c *golden.GenConfig) bool { return c.Kind != format.KindLayer }
	if sh := Shrink(dec, nil, 200, notLayer); sh.Config.Kind != format.KindModel || sh.Steps[0] != "model case (the full forward, no decoding)" {
		t.Errorf("a decode failure its full forward shows shrunk to %s, steps %v", Size(sh.Config), sh.Steps)
	}
	// A pinned kind is kept.
	if sh := Shrink(g, map[string]any{"kind": format.KindModel}, 200, fails); sh.Config.Kind != format.KindModel {
		t.Errorf("shrunk a case whose base pins kind model to a %s case", sh.Config.Kind)
	}
}

// TestDrawReachesTheEdges: draws reach every edge the corpus holds, and
// the case generated from the first draw of each has it: exact top-k ties
// (every row's gap 0), a causal threshold with the router's or the
// predictor's score exactly 0 in every row (that token not routed), every
// routed layer at full capacity (each row selects its every valid token),
// and a fully padded row (valid length 0, nothing selected).
func TestDrawReachesTheEdges(t *testing.T) {
	first := map[string]*golden.GenConfig{}
	for i := range 3000 {
		g, err := Draw(1, i, 0, Space{MaxSeq: 16})
		if err != nil {
			t.Fatal(err)
		}
		c := g.Config
		var edges []string
		if g.Ties == "exact" {
			edges = append(edges, "ties")
		}
		if g.Threshold {
			edges = append(edges, "threshold by "+string(c.Layer.Causal))
		}
		// Top-k at full capacity (causal routing follows the scores'
		// signs), in every routed layer.
		isFull := func(l spec.Config) bool {
			return l.Causal == spec.CausalOff && l.Capacity.Kind == spec.CapacityRatio && l.Capacity.Ratio == 1
		}
		full := c.Layer != nil && isFull(*c.Layer) || len(c.Layers) > 0
		for _, l := range c.Layers {
			full = full && (!l.Routed || isFull(l.Config))
		}
		if full && g.Kind != format.KindDecode {
			edges = append(edges, "full capacity")
		}
		if slices.Contains(c.ValidLengths, 0) && slices.ContainsFunc(c.ValidLengths, func(v int) bool { return v > 0 }) && g.Kind != format.KindMoDE {
			edges = append(edges, "fully padded row")
		}
		for _, e := range edges {
			if first[e] == nil {
				first[e] = g
			}
		}
	}
	for _, e := range []string{"ties", "threshold by router", "threshold by predictor", "full capacity", "fully padded row"} {
		g := first[e]
		if g == nil {
			t.Errorf("no draw has %s", e)
			continue
		}
		c, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
		if err != nil {
			t.Errorf("%s: %s: %v", e, Size(g), err)
			continue
		}
		sel := "expected.selected"
		if g.Kind != format.KindLayer {
			for l, ml := range g.Config.Layers {
				if ml.Routed {
					sel = fmt.Sprintf("expected.L%d.selected", l)
					break
				}
			}
		}
		rows := judge.PositionRows(c.Arrays[sel])
		valid := func(b int) int {
			if g.Config.ValidLengths == nil {
				return g.Config.SeqLen
			}
			return g.Config.ValidLengths[b]
		}
		switch e {
		case "ties":
			if !c.Manifest.Routing.Ties || slices.ContainsFunc(c.Manifest.Routing.Gaps[0], func(v float64) bool { return v != 0 }) {
				t.Errorf("ties: %s has gaps %v", Size(g), c.Manifest.Routing.Gaps)
			}
		case "threshold by router", "threshold by predictor":
			score := c.Arrays["expected.router_logits"]
			if e == "threshold by predictor" {
				score = c.Arrays["expected.predictor_logits"]
			}
			for b, row := range rows {
				zero := -1
				for i := range valid(b) {
					if score.F[b*g.Config.SeqLen+i] == 0 {
						zero = i
					}
				}
				if zero < 0 || slices.Contains(row, zero) {
					t.Errorf("%s: %s row %d: no score exactly 0 left out (selected %v)", e, Size(g), b, row)
				}
			}
		case "full capacity":
			for b, row := range rows {
				if len(row) != valid(b) {
					t.Errorf("full capacity: %s row %d selects %v of %d valid tokens", Size(g), b, row, valid(b))
				}
			}
		case "fully padded row":
			for b, row := range rows {
				if valid(b) == 0 && len(row) != 0 {
					t.Errorf("fully padded row: %s row %d selects %v", Size(g), b, row)
				}
			}
		}
	}
}
