package diagnose

import (
	"cmp"
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// TestDeviantOutputsByHand checks residual_twice, no_weighting and
// capacity_off_by_one on layer-paper against values worked out from the
// case's stored arrays alone (g = r with raw weighting, f = (out − x)/g at
// a routed token), not from the emulation code.
func TestDeviantOutputsByHand(t *testing.T) {
	c := loadCase(t, "layer-paper")
	ems := emulated(t, c)
	x, out, g := c.Arrays["input.x"], c.Arrays["expected.out"], c.Arrays["expected.weights"]
	sel, r := c.Arrays["expected.selected"], c.Arrays["expected.router_logits"]
	d, k := x.Shape[2], sel.Shape[1]
	twice := find(t, ems, "residual_twice").arrays["expected.out"]
	plain := find(t, ems, "no_weighting").arrays["expected.out"]
	for b := 0; b < 2; b++ {
		routed := int(sel.I[b*k+1])
		var skipped int
		for skipped = 0; skipped < x.Shape[1]; skipped++ {
			if at(c.Arrays["expected.targets"], b, skipped) == 0 {
				break
			}
		}
		for j := 0; j < d; j++ {
			xi, oi, gi := at(x, b, routed, j), at(out, b, routed, j), at(g, b, routed)
			if w := oi + gi*xi; !near(at(twice, b, routed, j), w, 1e-12) {
				t.Errorf("residual_twice out[%d %d %d] = %v, by hand x + g·(x + f) = %v", b, routed, j, at(twice, b, routed, j), w)
			}
			if w := xi + (oi-xi)/gi; !near(at(plain, b, routed, j), w, 1e-9) {
				t.Errorf("no_weighting out[%d %d %d] = %v, by hand x + f = %v", b, routed, j, at(plain, b, routed, j), w)
			}
			for _, a := range []*format.Array{twice, plain} {
				if at(a, b, skipped, j) != at(x, b, skipped, j) {
					t.Errorf("out[%d %d %d] of a skipped token changed", b, skipped, j)
				}
			}
		}
	}
	// Off by one: each row drops its selected token with the smallest r,
	// which then keeps x, and the selection narrows by one, padded with −1.
	off := find(t, ems, "capacity_off_by_one").arrays
	for b := 0; b < 2; b++ {
		drop := int(sel.I[b*k])
		for j := 1; j < k; j++ {
			if p := int(sel.I[b*k+j]); at(r, b, p) < at(r, b, drop) {
				drop = p
			}
		}
		var want []int64
		for j := 0; j < k; j++ {
			if p := sel.I[b*k+j]; int(p) != drop {
				want = append(want, p)
			}
		}
		want = append(want, -1)
		for j := 0; j < k; j++ {
			if off["expected.selected"].I[b*k+j] != want[j] {
				t.Errorf("row %d: off-by-one selection %v, by hand %v", b, off["expected.selected"].I[b*k:(b+1)*k], want)
				break
			}
		}
		for j := 0; j < d; j++ {
			if at(off["expected.out"], b, drop, j) != at(x, b, drop, j) {
				t.Errorf("row %d: dropped token %d still updated", b, drop)
			}
		}
		if at(off["expected.targets"], b, drop) != 0 || at(off["expected.multipliers"], b, drop) != 0 {
			t.Errorf("row %d: dropped token %d keeps its target or multiplier", b, drop)
		}
	}
}

// TestUnsortedIndicesByHand: with the causal mask in score order, the token
// of each row with the largest router weight attends to itself alone, so
// its update is ref's block on that one token at its own position.
func TestUnsortedIndicesByHand(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "unsorted_indices").arrays["expected.out"]
	sel, r, g := c.Arrays["expected.selected"], c.Arrays["expected.router_logits"], c.Arrays["expected.weights"]
	k := sel.Shape[1]
	for b := 0; b < 2; b++ {
		top := int(sel.I[b*k])
		for j := 1; j < k; j++ {
			if p := int(sel.I[b*k+j]); at(r, b, p) > at(r, b, top) {
				top = p
			}
		}
		xi := mat.NewDense(1, s.Config.Block.D, append([]float64(nil), dr.In.X[b].RawRowView(top)...))
		f, err := ref.BlockUpdate(s.Config.Block, &dr.P.Block, xi, []int{top})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < s.Config.Block.D; j++ {
			want := xi.At(0, j) + at(g, b, top)*f.At(0, j)
			if !near(at(got, b, top, j), want, 1e-12) {
				t.Errorf("row %d, top token %d, [%d]: %v, by hand %v", b, top, j, at(got, b, top, j), want)
			}
		}
	}
}

// TestWeightMLPOnlyByHand: with the weight on the MLP's update alone, a
// selected token's output is the oracle's plus (1 − g)·a, a its attention
// update (ref.AttentionUpdate on the row's selected tokens at their
// positions); other tokens keep x. With the returned residual too
// (sramshetty/mixture-of-depths' block), x is added once more, unweighted.
func TestWeightMLPOnlyByHand(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "weight_mlp_only").arrays["expected.out"]
	both, err := DeviantCandidate(c, "residual_twice+weight_mlp_only", "")
	if err != nil {
		t.Fatal(err)
	}
	x, out, g, sel := c.Arrays["input.x"], c.Arrays["expected.out"], c.Arrays["expected.weights"], c.Arrays["expected.selected"]
	k, d := sel.Shape[1], s.Config.Block.D
	for b := 0; b < 2; b++ {
		var pos []int
		for j := 0; j < k; j++ {
			if p := int(sel.I[b*k+j]); p >= 0 {
				pos = append(pos, p)
			}
		}
		xs := mat.NewDense(len(pos), d, nil)
		for n, p := range pos {
			xs.SetRow(n, dr.In.X[b].RawRowView(p))
		}
		a, err := ref.AttentionUpdate(s.Config.Block, &dr.P.Block, xs, pos)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < s.SeqLen; i++ {
			t0 := slices.Index(pos, i)
			for j := 0; j < d; j++ {
				want := at(x, b, i, j)
				if t0 >= 0 {
					want = at(out, b, i, j) + (1-at(g, b, i))*a.At(t0, j)
				}
				if !near(at(got, b, i, j), want, 1e-12) {
					t.Errorf("row %d, token %d, [%d]: %v, by hand %v", b, i, j, at(got, b, i, j), want)
				}
				if t0 >= 0 && !near(at(both["out"], b, i, j), want+at(x, b, i, j), 1e-12) {
					t.Errorf("with residual_twice, row %d, token %d, [%d]: %v, by hand %v", b, i, j, at(both["out"], b, i, j), want+at(x, b, i, j))
				}
			}
		}
	}
}

// TestGatherFirstKByHand: gathering argsort(top-k indices) as positions
// runs the block on positions 0..k−1, π_t = argsort's t-th, weighted by the
// multiplier of the t-th selected position p_t; positions from k on keep x,
// selected or not. The first gathered token attends to itself alone, so
// its update is ref's block on that one token at its own position.
func TestGatherFirstKByHand(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "gather_first_k").arrays
	x, r, g, sel := c.Arrays["input.x"], c.Arrays["expected.router_logits"], c.Arrays["expected.weights"], c.Arrays["expected.selected"]
	k, d := sel.Shape[1], s.Config.Block.D
	for b := 0; b < 2; b++ {
		pos := make([]int, k)
		for j := range pos {
			pos[j] = int(sel.I[b*k+j])
		}
		// top-k's order: descending r; argsort of it, by position
		score := slices.Clone(pos)
		slices.SortStableFunc(score, func(p, q int) int { return cmp.Compare(at(r, b, q), at(r, b, p)) })
		pi := make([]int, k)
		for n := range pi {
			pi[n] = slices.Index(score, pos[n])
		}
		for n, p := range pos {
			if m := at(got["expected.multipliers"], b, pi[n]); m != at(g, b, p) {
				t.Errorf("row %d: multiplier at position %d = %v, want g at selected position %d = %v", b, pi[n], m, p, at(g, b, p))
			}
		}
		for i := k; i < s.SeqLen; i++ {
			for j := 0; j < d; j++ {
				if at(got["expected.out"], b, i, j) != at(x, b, i, j) {
					t.Fatalf("row %d: position %d past k changed", b, i)
				}
			}
		}
		first := pi[0]
		xi := mat.NewDense(1, d, slices.Clone(dr.In.X[b].RawRowView(first)))
		f, err := ref.BlockUpdate(s.Config.Block, &dr.P.Block, xi, []int{first})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < d; j++ {
			want := xi.At(0, j) + at(g, b, pos[0])*f.At(0, j)
			if !near(at(got["expected.out"], b, first, j), want, 1e-12) {
				t.Errorf("row %d, first gathered position %d, [%d]: %v, by hand %v", b, first, j, at(got["expected.out"], b, first, j), want)
			}
		}
	}
}

// TestWindowGatheredByHand: with the window counted in gathered indices,
// the selected token at index t of its row attends to the selected tokens
// at indices t − w + 1 .. t, however far back their positions are; so its
// update is the last row of ref's unwindowed block on those tokens alone,
// at their original positions. The case's own (oracle) output differs.
func TestWindowGatheredByHand(t *testing.T) {
	c := loadCase(t, "layer-window")
	s := layerSpecOf(c)
	w := s.Config.Block.Window
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "window_gathered_indices").arrays["expected.out"]
	sel, g, want := c.Arrays["expected.selected"], c.Arrays["expected.weights"], c.Arrays["expected.out"]
	k := sel.Shape[1]
	unwindowed := s.Config.Block
	unwindowed.Window = 0
	differ := 0
	for b := 0; b < s.Batch; b++ {
		var pos []int
		for j := 0; j < k; j++ {
			if p := int(sel.I[b*k+j]); p >= 0 {
				pos = append(pos, p)
			}
		}
		for ti, p := range pos {
			last := pos[max(0, ti-w+1) : ti+1]
			xs := mat.NewDense(len(last), s.Config.Block.D, nil)
			for r, q := range last {
				xs.SetRow(r, dr.In.X[b].RawRowView(q))
			}
			f, err := ref.BlockUpdate(unwindowed, &dr.P.Block, xs, last)
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j < s.Config.Block.D; j++ {
				byHand := dr.In.X[b].At(p, j) + at(g, b, p)*f.At(len(last)-1, j)
				if !near(at(got, b, p, j), byHand, 1e-12) {
					t.Errorf("row %d, token %d (index %d), [%d]: %v, by hand %v", b, p, ti, j, at(got, b, p, j), byHand)
				}
				if !near(at(want, b, p, j), byHand, 1e-9) {
					differ++
				}
			}
		}
	}
	if differ == 0 {
		t.Error("the oracle's output equals the gathered-index window's everywhere: the case cannot tell them apart")
	}
}

// TestScoreOrderRotation: fed in ascending position order, the score-order
// block (positions 0..k−1 with Wq, Wk rotated by p_t − t) gives ref's output:
// the rotation trick preserves RoPE at the original positions.
func TestScoreOrderRotation(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	var oracle layerDeviation
	var st layerState
	l, err := oracle.run(s.Config, dr.P, dr.In, &st)
	if err != nil {
		t.Fatal(err)
	}
	st.order = l.res.Selection.Rows
	d := layerDeviation{scoreOrder: true}
	d.regather(l)
	for b, o := range l.out {
		if !mat.EqualApprox(o, l.res.Out[b], 1e-12) {
			t.Errorf("row %d: rotated positions change the output", b)
		}
	}
}

// TestRoPEAtIndexRotation: the rope_gathered_indices block (tokens fed at
// their positions p_t with Wq, Wk rotated by t − p_t) equals the block run
// plainly on the gathered tokens as a sequence 0..k−1 of its own, which is
// what the deviant port does.
func TestRoPEAtIndexRotation(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	d := layerDeviation{ropeAtIndex: true}
	var st layerState
	l, err := d.run(s.Config, dr.P, dr.In, &st)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for b, x := range dr.In.X {
		var kv ref.KVCache
		for t2, i := range l.res.Selection.Rows[b] {
			f := kv.BlockStep(s.Config.Block, &dr.P.Block, x.RawRowView(i), t2)
			for j, v := range f {
				if got := l.upd[b].At(i, j); math.Abs(got-v) > 1e-12 {
					t.Fatalf("row %d token %d: update %v, the block on the gathered sequence gives %v", b, i, got, v)
				}
				if math.Abs(v-l.res.Update[b].At(i, j)) > 1e-6 {
					moved = true
				}
			}
		}
	}
	if !moved {
		t.Error("RoPE at the gathered indices changes no update: the test shows nothing")
	}
}

// TestSTEMPlusOneGradient derives the straight-through deviation's gradient
// independently. With w = g·m + (g − sg(g)), dw/dg = m + 1, one more than
// docs/spec.md §7's 1 on the selected tokens, so the gradient gains
// Σ_i m_i c_i ∂g_i/∂θ with c_i = ∂loss/∂w_i = Σ_j U_ij f_ij. With raw
// weights g_i = r_i = w_router·x_i, so ∂g_i/∂w_router = x_i and
// ∂g_i/∂x_i = w_router; f_i = (out_i − x_i)/g_i at a selected token. All
// of it comes from the stored arrays of layer-dense-ste-raw.
func TestSTEMPlusOneGradient(t *testing.T) {
	// The derivative of the formula itself, by central differences.
	for _, m := range []float64{0, 1} {
		g0 := 0.7
		w := func(g float64) float64 { return g*m + (g - g0) }
		h := 1e-6
		if d := (w(g0+h) - w(g0-h)) / (2 * h); !near(d, m+1, 1e-9) {
			t.Errorf("m = %v: dw/dg = %v, want m + 1", m, d)
		}
	}
	c := loadCase(t, "layer-dense-ste-raw")
	dev := find(t, emulated(t, c), "ste_m_plus_1").arrays
	x, out, u := c.Arrays["input.x"], c.Arrays["expected.out"], c.Arrays["upstream.out"]
	g, tg, wr := c.Arrays["expected.weights"], c.Arrays["expected.targets"], c.Arrays["param.Router"]
	rows, s, d := x.Shape[0], x.Shape[1], x.Shape[2]
	dRouter := make([]float64, d)
	dx := make([]float64, rows*s*d)
	for b := 0; b < rows; b++ {
		for i := 0; i < s; i++ {
			if at(tg, b, i) == 0 {
				continue
			}
			ci := 0.0
			for j := 0; j < d; j++ {
				ci += at(u, b, i, j) * (at(out, b, i, j) - at(x, b, i, j)) / at(g, b, i)
			}
			for j := 0; j < d; j++ {
				dRouter[j] += ci * at(x, b, i, j)
				dx[(b*s+i)*d+j] = ci * wr.F[j]
			}
		}
	}
	check := func(name string, delta []float64) {
		got, base := dev[name], c.Arrays[name]
		for k := range delta {
			if diff := got.F[k] - base.F[k]; math.Abs(diff-delta[k]) > 1e-6*math.Max(1, math.Abs(delta[k])) {
				t.Errorf("%s%v: deviant − oracle = %v, by hand %v", name, base.Index(k), diff, delta[k])
				return
			}
		}
	}
	check("grad.param.Router", dRouter)
	check("grad.input.x", dx)
	for _, name := range []string{"expected.out", "expected.loss", "grad.param.Wq"} {
		for k, v := range c.Arrays[name].F {
			if math.Abs(dev[name].F[k]-v) > 1e-6*math.Max(1, math.Abs(v)) {
				t.Errorf("%s%v changed: %v, oracle %v", name, c.Arrays[name].Index(k), dev[name].F[k], v)
				break
			}
		}
	}
}

// TestNoWeightingReportsG: an implementation that computes g and never
// applies it is ref with weighting "none" (out = x + m·f, multipliers m, the
// router's gradient from the auxiliary losses only), reporting the g its
// router computes as weights. That candidate, made by ref and not by the
// emulation, must be named no_weighting and nothing else.
func TestNoWeightingReportsG(t *testing.T) {
	for _, name := range []string{"layer-paper", "layer-softmax", "layer-dense-ste"} {
		c := loadCase(t, name)
		m := *c.Manifest
		l := *m.Config.Layer
		l.Weighting = spec.WeightNone
		m.Config.Layer = &l
		cand, err := oracle.RefCandidate(&format.Case{Manifest: &m, Arrays: c.Arrays})
		if err != nil {
			t.Fatal(err)
		}
		cand["weights"] = c.Arrays["expected.weights"]
		rs, err := diagnoseWith(c, cand, emulated(t, c))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Match != (r.Name == "no_weighting") {
				t.Errorf("%s: %s match = %v (%d/%d arrays, worst %s)", name, label(r), r.Match, r.Matching, r.Total, r.Worst.Name)
			}
		}
	}
}

// TestCapacityOffByOneCausal: under causal routing the routing follows the
// sign of r, so an off-by-one capacity leaves selected and out alone and
// drops from each row's targets the top-k token with the smallest r.
func TestCapacityOffByOneCausal(t *testing.T) {
	c := loadCase(t, "layer-causal-router")
	off := find(t, emulated(t, c), "capacity_off_by_one").arrays
	for _, n := range []string{"expected.selected", "expected.out", "expected.multipliers"} {
		a, b := off[n], c.Arrays[n]
		if !slices.Equal(a.F, b.F) || !slices.Equal(a.I, b.I) {
			t.Errorf("%s changed", n)
		}
	}
	r, tg := c.Arrays["expected.router_logits"], c.Arrays["expected.targets"]
	s := r.Shape[1]
	for b := range r.Shape[0] {
		drop := -1
		for i := range s {
			if tg.F[b*s+i] == 1 && (drop < 0 || r.F[b*s+i] < r.F[b*s+drop]) {
				drop = i
			}
		}
		for i := range s {
			want := tg.F[b*s+i]
			if i == drop {
				want = 0
			}
			if got := off["expected.targets"].F[b*s+i]; got != want {
				t.Errorf("row %d position %d: off-by-one target %v, by hand %v", b, i, got, want)
			}
		}
	}
	if off["expected.aux.total"].F[0] == c.Arrays["expected.aux.total"].F[0] {
		t.Error("the off-by-one targets leave aux.total unchanged")
	}
}

// TestCapacityOffByOneDropsTies: the strict rule {i : r_i > r_(k)} keeps
// k − 1 tokens without a tie at the k-th weight and drops every token tied
// with it; on model-all-layers, whose repeated token ties router weights
// exactly, some row of layer 0 keeps fewer than k − 1.
func TestCapacityOffByOneDropsTies(t *testing.T) {
	r := [][]float64{{3, 1, 2, 2, 0}, {3, 1, 2, 2, 0}, {5, 4, 3, 2, 1}, {0, 0, 0, 0, 0}}
	got := aboveKth(r, []int{3, 2, 3, 1}, []int{5, 5, 5, 5})
	if want := []int{1, 1, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("aboveKth = %v, want %v", got, want)
	}
	if got := aboveKth([][]float64{{1, 2, 9}}, []int{1}, []int{2}); got[0] != 0 {
		t.Errorf("a padded weight counted: %v", got)
	}
	c := loadCase(t, "model-all-layers")
	sel := find(t, emulated(t, c), "capacity_off_by_one").arrays["expected.L0.selected"]
	k, err := ref.RowCapacities(c.Manifest.Config.Layers[0].Config.Capacity, c.Manifest.Config.Batch, c.Manifest.Config.SeqLen, c.Manifest.Config.ValidLengths)
	if err != nil {
		t.Fatal(err)
	}
	short := false
	for b := range sel.Shape[0] {
		n := 0
		for _, p := range sel.I[b*sel.Shape[1] : (b+1)*sel.Shape[1]] {
			if p >= 0 {
				n++
			}
		}
		if n > k[b]-1 {
			t.Errorf("row %d keeps %d tokens, more than k − 1 = %d", b, n, k[b]-1)
		}
		short = short || n < k[b]-1
	}
	if !short {
		t.Error("no row of model-all-layers' layer 0 drops a tie: the case does not exercise the strict rule")
	}
}

// TestNoCausalMaskLastToken: without a causal mask the last selected token
// of a row still attends to exactly the tokens it attends to with one, so
// its update is ref's; the first one, which then sees every later token,
// differs.
func TestNoCausalMaskLastToken(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := findLayerDeviation("no_causal_mask")
	var st layerState
	l, err := d.run(s.Config, dr.P, dr.In, &st)
	if err != nil {
		t.Fatal(err)
	}
	for b, sel := range l.res.Selection.Rows {
		last, first := sel[len(sel)-1], sel[0]
		if !floats(l.upd[b].RawRowView(last), l.res.Update[b].RawRowView(last), 1e-12) {
			t.Errorf("row %d: the last selected token's update %v, ref's %v", b, l.upd[b].RawRowView(last), l.res.Update[b].RawRowView(last))
		}
		if floats(l.upd[b].RawRowView(first), l.res.Update[b].RawRowView(first), 1e-6) {
			t.Errorf("row %d: the first selected token's update is ref's: the test shows nothing", b)
		}
	}
}

// TestUngatedExpertsByHand checks mode_ungated_experts on
// layer-mode-integrated against values worked out from the case's stored
// arrays and ref's attention alone, not from the emulation code: with
// h = x + Attn(N1(x)), a token no conventional expert chose keeps h under
// both, and a token only expert e chose has out − h = G_e·y in the case and
// y, ungated, in the deviation.
func TestUngatedExpertsByHand(t *testing.T) {
	c := loadCase(t, "layer-mode-integrated")
	cfg := *c.Manifest.Config.MoDE
	em := find(t, emulated(t, c), "mode_ungated_experts")
	x, out, dev := c.Arrays["input.x"], c.Arrays["expected.out"], em.arrays["expected.out"]
	gates, choice := c.Arrays["expected.gates"], c.Arrays["expected.expert_choice"]
	p := ref.NewMoDEParams(cfg, ref.NewRand(0))
	if err := oracle.LoadParams(c, p.Tensors("")); err != nil {
		t.Fatal(err)
	}
	s, d, width, ke := c.Manifest.Config.SeqLen, cfg.Block.D, cfg.GateWidth(), choice.Shape[2]
	none, one := 0, 0
	for b, xb := range oracle.Matrices(x) {
		a, err := ref.AttentionUpdate(cfg.Block, &p.Block, xb, []int{0, 1, 2, 3, 4, 5, 6, 7})
		if err != nil {
			t.Fatal(err)
		}
		for i := range s {
			var chose []int
			for e := range cfg.Experts {
				for j := range ke {
					if int(choice.I[(b*width+e)*ke+j]) == i {
						chose = append(chose, e)
					}
				}
			}
			if len(chose) > 1 {
				continue
			}
			for j := range d {
				h := xb.At(i, j) + a.At(i, j)
				want := h
				if len(chose) == 1 {
					want = h + (at(out, b, i, j)-h)/at(gates, b, i, chose[0])
				}
				if !near(at(dev, b, i, j), want, 1e-12) {
					t.Errorf("row %d position %d (experts %v): ungated out[%d] = %v, want %v", b, i, chose, j, at(dev, b, i, j), want)
				}
			}
			if len(chose) == 0 {
				none++
			} else {
				one++
			}
		}
	}
	if none == 0 || one == 0 {
		t.Errorf("%d tokens chosen by no expert and %d by one: the case does not exercise both", none, one)
	}
}
