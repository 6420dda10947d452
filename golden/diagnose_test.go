package golden

import (
	"github.com/modref/modref/golden/format"

	"cmp"
	"math"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// emulations caches emulate's results by case name: the tests share them
// to keep the finite-difference passes few.
var emulations = map[string][]emulation{}

// emulated returns the case's emulations, failing the test on an error.
func emulated(t *testing.T, c *format.Case) []emulation {
	t.Helper()
	if ems, ok := emulations[c.Manifest.Name]; ok {
		return ems
	}
	ems, err := emulate(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emulations[c.Manifest.Name] = ems
	return ems
}

// find returns the emulation of a deviation (the first variant).
func find(t *testing.T, ems []emulation, name string) emulation {
	t.Helper()
	for _, em := range ems {
		if em.name == name {
			if em.reason != "" {
				t.Fatalf("%s is not emulated: %s", name, em.reason)
			}
			return em
		}
	}
	t.Fatalf("no emulation of %s", name)
	return emulation{}
}

func label(r DeviationResult) string {
	if r.Variant != "" {
		return r.Name + " (" + r.Variant + ")"
	}
	return r.Name
}

// TestDiagnoseNamesEachDeviation builds, for every deviation emulated on a
// few cases, a candidate that has it, and requires Diagnose to name exactly
// that deviation and not the oracle; the case's own values match the oracle
// and no deviation that changes an array.
func TestDiagnoseNamesEachDeviation(t *testing.T) {
	want := map[string][]string{
		"layer-paper":           {"residual_twice", "residual_scaled", "unsorted_indices", "no_weighting", "capacity_off_by_one", "rope_gathered_indices", "targets_first_row", "weight_mlp_only", "gather_first_k", "no_causal_mask", "tanh_gate", "skipped_scaled"},
		"layer-losses-sigmoid":  {"tanh_gate", "skipped_scaled", "aux_over_padding", "predictor_block_output"},
		"layer-router-bce":      {"targets_first_row", "rope_gathered_indices"},
		"layer-short-row":       {"capacity_floor_zero", "capacity_off_by_one"},
		"layer-dense-ste":       {"residual_twice", "residual_scaled", "no_weighting", "ste_m_plus_1", "capacity_off_by_one"},
		"layer-predictor":       {"predictor_no_stopgrad", "predictor_block_output"},
		"layer-mlp-only":        {"residual_twice", "residual_scaled", "no_weighting"},
		"layer-causal-router":   {"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"},
		"model-predictor":       {"residual_twice", "unsorted_indices", "predictor_no_stopgrad", "predictor_block_output", "capacity_off_by_one"},
		"decode-predictor":      {"decode_mismatch"},
		"decode-window":         {"decode_mismatch", "window_gathered_indices"},
		"layer-window":          {"window_gathered_indices", "residual_twice", "unsorted_indices", "no_weighting", "capacity_off_by_one"},
		"layer-mode-staged":     {"mode_ungated_experts"},
		"layer-mode-integrated": {"mode_ungated_experts"},
	}
	for name, devs := range want {
		c := loadCase(t, name)
		ems := emulated(t, c)
		seen := make(map[string]bool)
		for _, em := range ems {
			if em.reason != "" {
				continue
			}
			seen[em.name] = true
			dc, err := deviantCase(c, em)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := diagnoseWith(c, candidateOf(dc), ems)
			if err != nil {
				t.Fatal(err)
			}
			if !rs[1+indexOf(ems, em)].Distinct {
				continue
			}
			for i, r := range rs {
				self := r.Name == em.name && r.Variant == em.variant
				if r.Match && !self && i > 0 && sameOnCase(t, c, em, ems[i-1]) {
					continue // two deviations this case cannot tell apart
				}
				if r.Match != self {
					t.Errorf("%s, candidate with %s: %s match = %v (%d/%d arrays, worst %s)",
						name, label(DeviationResult{Name: em.name, Variant: em.variant}), label(r), r.Match, r.Matching, r.Total, r.Worst.Name)
				}
			}
		}
		for _, d := range devs {
			if !seen[d] {
				t.Errorf("%s: %s is not emulated", name, d)
			}
			for _, em := range ems {
				if em.name == d && em.reason == "" {
					r, err := judge(c, perfect(c), em)
					if err != nil {
						t.Fatal(err)
					}
					if !r.Distinct || r.Match {
						t.Errorf("%s: %s distinct = %v, the case's own values match it = %v", name, label(r), r.Distinct, r.Match)
					}
				}
			}
		}
	}
}

// sameOnCase reports whether two emulations give the same values on the
// case, within its tolerances both ways: no candidate of this case can tell
// them apart (capacity_off_by_one and capacity_floor_zero on
// layer-capacity-floor, where 0.29·100 floors to 28 either way).
func sameOnCase(t *testing.T, c *format.Case, a, b emulation) bool {
	t.Helper()
	if b.reason != "" {
		return false
	}
	da, err := deviantCase(c, a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := deviantCase(c, b)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := Compare(da, candidateOf(db), false)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := Compare(db, candidateOf(da), false)
	if err != nil {
		t.Fatal(err)
	}
	return ab.Pass && ba.Pass
}

func indexOf(ems []emulation, em emulation) int {
	for i, e := range ems {
		if e.name == em.name && e.variant == em.variant {
			return i
		}
	}
	return -1
}

// TestDiagnosePerfectCandidate runs Diagnose itself: the case's own values
// match the oracle, and a deviation matches only where this case cannot
// tell it from the oracle (layer-none: with g = 1, no weighting, a
// scaled residual and a weight on the MLP's update alone change nothing).
func TestDiagnosePerfectCandidate(t *testing.T) {
	c := loadCase(t, "layer-none")
	rs, err := Diagnose(c, perfect(c))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Name != OracleName || !rs[0].Match || rs[0].Matching != rs[0].Total {
		t.Fatalf("oracle result %+v", rs[0])
	}
	indistinct := map[string]bool{}
	for _, r := range rs[1:] {
		if r.Emulated && r.Match != !r.Distinct {
			t.Errorf("%s: match %v, distinct %v", r.Name, r.Match, r.Distinct)
		}
		if r.Emulated && !r.Distinct {
			indistinct[r.Name] = true
		}
		if !r.Emulated && r.Reason == "" {
			t.Errorf("%s is not emulated and says no reason", r.Name)
		}
	}
	// capacity_floor_zero: int(0.5·8) = 4 is the robust floor too;
	// aux_over_padding: the case has no padding.
	if !indistinct["no_weighting"] || !indistinct["residual_scaled"] || !indistinct["weight_mlp_only"] || !indistinct["capacity_floor_zero"] || !indistinct["aux_over_padding"] || len(indistinct) != 5 {
		t.Errorf("indistinguishable deviations on layer-none: %v, want no_weighting, residual_scaled, weight_mlp_only, capacity_floor_zero and aux_over_padding", indistinct)
	}
}

// TestDiagnoseBadCandidate: bad input is an error, as in Compare.
func TestDiagnoseBadCandidate(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand := perfect(c)
	delete(cand, "out")
	if _, err := Diagnose(c, cand); err == nil {
		t.Error("a candidate without out: no error")
	}
	cand = perfect(c)
	cand["weights"].F[2] = math.Inf(1)
	if _, err := Diagnose(c, cand); err == nil {
		t.Error("a candidate with Inf: no error")
	}
	// A case whose manifest and arrays agree on a shape its sizes contradict.
	x := *c.Arrays["input.x"]
	x.Shape = []int{2, 64}
	c.Arrays["input.x"] = &x
	if _, err := Diagnose(c, perfect(c)); err == nil || !strings.Contains(err.Error(), "input.x") {
		t.Errorf("input.x of shape [2 64]: error %v", err)
	}
}

// TestOracleEmulationReproducesCases: with no deviation the emulation
// machinery (the layer run, the model loop, the decoder) gives back every
// stored array bit for bit, forward values and gradients (the emulation's
// backward passes, diagnose_grad.go, are ref's with the oracle's output),
// so a deviation's arrays differ from the case's only by the deviation.
func TestOracleEmulationReproducesCases(t *testing.T) {
	var oracle layerDeviation
	for _, name := range []string{"layer-mlp-only", "model-every-other", "decode-router"} {
		c := loadCase(t, name)
		var arrays map[string]*format.Array
		var err error
		switch c.Manifest.Kind {
		case format.KindLayer:
			arrays, err = layerArrays(c, layerSpecOf(c), &oracle)
		case format.KindModel:
			arrays, err = modelArrays(c, modelSpecOf(c), &oracle)
		case format.KindDecode:
			s := modelSpecOf(c)
			p, in, derr := modelDrawOf(c, s)
			if derr != nil {
				t.Fatal(derr)
			}
			arrays, err = decodeArrays(c, s, p, in, decodeVariant{}, expectedArrays(c))
			if a, b := arrays["expected.decode_logits"], c.Arrays["expected.decode_logits"]; a == b {
				t.Fatal("decode_logits not recomputed")
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range c.Manifest.Arrays {
			if info.Role != format.RoleExpected {
				continue
			}
			got, want := arrays[info.Name], c.Arrays[info.Name]
			if got == nil {
				t.Errorf("%s: %s not computed", name, info.Name)
				continue
			}
			for k := range want.F {
				if got.F[k] != want.F[k] {
					t.Errorf("%s: %s%v = %v, stored %v (difference %.3g)", name, info.Name, want.Index(k), got.F[k], want.F[k], got.F[k]-want.F[k])
					break
				}
			}
			for k := range want.I {
				if got.I[k] != want.I[k] {
					t.Errorf("%s: %s%v = %v, stored %v", name, info.Name, want.Index(k), got.I[k], want.I[k])
					break
				}
			}
		}
	}
}

// emulatedGradTol bounds the difference between the oracle emulation's
// finite-difference gradients (layerArraysFD, modelArraysFD) and the
// corpus' analytic ones, relative to max(‖e‖∞, 1): on these cases, whose
// values are of order one, they differ by at most 1e-9
// (docs/tolerances.md).
const emulatedGradTol = 1e-7

// maxAbs is the largest |v| of a.
func maxAbs(a []float64) float64 {
	m := 0.0
	for _, v := range a {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// at returns element [b i j] of a B×S×d array, or [b i] of a B×S one.
func at(a *format.Array, idx ...int) float64 {
	k := 0
	for d, i := range idx {
		k = k*a.Shape[d] + i
	}
	return a.F[k]
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

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
	dr, err := layerDrawOf(c, s)
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
		xi := mat.NewDense(1, s.cfg.Block.D, append([]float64(nil), dr.in.X[b].RawRowView(top)...))
		f, err := ref.BlockUpdate(s.cfg.Block, &dr.p.Block, xi, []int{top})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < s.cfg.Block.D; j++ {
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
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "weight_mlp_only").arrays["expected.out"]
	both, err := DeviantCandidate(c, "residual_twice+weight_mlp_only", "")
	if err != nil {
		t.Fatal(err)
	}
	x, out, g, sel := c.Arrays["input.x"], c.Arrays["expected.out"], c.Arrays["expected.weights"], c.Arrays["expected.selected"]
	k, d := sel.Shape[1], s.cfg.Block.D
	for b := 0; b < 2; b++ {
		var pos []int
		for j := 0; j < k; j++ {
			if p := int(sel.I[b*k+j]); p >= 0 {
				pos = append(pos, p)
			}
		}
		xs := mat.NewDense(len(pos), d, nil)
		for n, p := range pos {
			xs.SetRow(n, dr.in.X[b].RawRowView(p))
		}
		a, err := ref.AttentionUpdate(s.cfg.Block, &dr.p.Block, xs, pos)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < s.seqLen; i++ {
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
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "gather_first_k").arrays
	x, r, g, sel := c.Arrays["input.x"], c.Arrays["expected.router_logits"], c.Arrays["expected.weights"], c.Arrays["expected.selected"]
	k, d := sel.Shape[1], s.cfg.Block.D
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
		for i := k; i < s.seqLen; i++ {
			for j := 0; j < d; j++ {
				if at(got["expected.out"], b, i, j) != at(x, b, i, j) {
					t.Fatalf("row %d: position %d past k changed", b, i)
				}
			}
		}
		first := pi[0]
		xi := mat.NewDense(1, d, slices.Clone(dr.in.X[b].RawRowView(first)))
		f, err := ref.BlockUpdate(s.cfg.Block, &dr.p.Block, xi, []int{first})
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

// TestCombineNamesRules: deviations that say the same thing differently
// are not combined; sramshetty/mixture-of-depths' block is.
func TestCombineNamesRules(t *testing.T) {
	for combo, want := range map[string]bool{
		"residual_twice+rope_gathered_indices+weight_mlp_only": true,
		"residual_twice+gather_first_k":                        true,
		"residual_scaled+weight_mlp_only":                      false,
		"no_weighting+weight_mlp_only":                         false,
		"unsorted_indices+gather_first_k":                      false,
		"gather_first_k+no_causal_mask":                        false,
	} {
		if _, ok := combineNames(strings.Split(combo, "+")); ok != want {
			t.Errorf("%s: combined = %v, want %v", combo, ok, want)
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
	w := s.cfg.Block.Window
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	got := find(t, emulated(t, c), "window_gathered_indices").arrays["expected.out"]
	sel, g, want := c.Arrays["expected.selected"], c.Arrays["expected.weights"], c.Arrays["expected.out"]
	k := sel.Shape[1]
	unwindowed := s.cfg.Block
	unwindowed.Window = 0
	differ := 0
	for b := 0; b < s.batch; b++ {
		var pos []int
		for j := 0; j < k; j++ {
			if p := int(sel.I[b*k+j]); p >= 0 {
				pos = append(pos, p)
			}
		}
		for ti, p := range pos {
			last := pos[max(0, ti-w+1) : ti+1]
			xs := mat.NewDense(len(last), s.cfg.Block.D, nil)
			for r, q := range last {
				xs.SetRow(r, dr.in.X[b].RawRowView(q))
			}
			f, err := ref.BlockUpdate(unwindowed, &dr.p.Block, xs, last)
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j < s.cfg.Block.D; j++ {
				byHand := dr.in.X[b].At(p, j) + at(g, b, p)*f.At(len(last)-1, j)
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
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	var oracle layerDeviation
	var st layerState
	l, err := oracle.run(s.cfg, dr.p, dr.in, &st)
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
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	d := layerDeviation{ropeAtIndex: true}
	var st layerState
	l, err := d.run(s.cfg, dr.p, dr.in, &st)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for b, x := range dr.in.X {
		var kv ref.KVCache
		for t2, i := range l.res.Selection.Rows[b] {
			f := kv.BlockStep(s.cfg.Block, &dr.p.Block, x.RawRowView(i), t2)
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

// TestDeviantCandidate: the exported candidate of a deviation is named by
// Diagnose; an unknown or unemulated deviation is an error.
func TestDeviantCandidate(t *testing.T) {
	c := loadCase(t, "decode-router")
	cand, err := DeviantCandidate(c, "decode_mismatch", "skipped tokens cached")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Match != (r.Variant == "skipped tokens cached") {
			t.Errorf("%s: match %v", label(r), r.Match)
		}
	}
	if _, err := DeviantCandidate(c, "residual_twice", ""); err == nil {
		t.Error("residual_twice on a decode case: no error")
	}
	if _, err := DeviantCandidate(c, "bogus", ""); err == nil {
		t.Error("an unknown deviation: no error")
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
		cand, err := RefCandidate(&format.Case{Manifest: &m, Arrays: c.Arrays})
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

// TestDiagnoseNamesCombinations plants several deviations at once through
// the Go emulations and requires Diagnose to name exactly that
// combination, and no single deviation: the seed blog's RoPE at gathered
// indices with its first-row targets, a returned residual with unsorted
// indices, a triple whose predictor deviation alone brings the candidate
// no closer, a triple with a selection change, and four at once.
func TestDiagnoseNamesCombinations(t *testing.T) {
	for _, tc := range []struct{ name, combo string }{
		{"layer-router-bce", "rope_gathered_indices+targets_first_row"},
		{"layer-paper", "residual_twice+unsorted_indices"},
		{"layer-predictor", "residual_twice+predictor_no_stopgrad+targets_first_row"},
		{"layer-paper", "residual_twice+rope_gathered_indices+weight_mlp_only"},
		// astramind-ai/Mixture-of-depths without an attention mask: the
		// selection changes, and every other deviation alone looks as
		// far as the oracle.
		{"layer-paper", "residual_scaled+capacity_off_by_one+no_causal_mask"},
		// sramshetty/mixture-of-depths' routed block before its fix of
		// 2024-06-06.
		{"layer-integer-capacity", "residual_twice+rope_gathered_indices+weight_mlp_only+gather_first_k"},
	} {
		c := loadCase(t, tc.name)
		cand, err := DeviantCandidate(c, tc.combo, "")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		var matched []string
		for _, r := range rs {
			if r.Match {
				matched = append(matched, r.Name)
			}
		}
		if !slices.Equal(matched, []string{tc.combo}) {
			t.Errorf("%s, candidate with %s: matched %v, want only the combination", tc.name, tc.combo, matched)
		}
	}
}

// TestDiagnoseNoCombination: a candidate that no deviation or combination
// explains gets no match, and the combinations searched are only those of
// deviations that each bring it closer.
func TestDiagnoseNoCombination(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand, err := DeviantCandidate(c, "no_weighting", "")
	if err != nil {
		t.Fatal(err)
	}
	out := *cand["out"]
	out.F = slices.Clone(out.F)
	out.F[5] += 1
	cand["out"] = &out
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Match {
			t.Errorf("%s matches a candidate with a corrupted out", r.Name)
		}
		if strings.Contains(r.Name, "+") && !strings.Contains(r.Name, "no_weighting") {
			t.Errorf("combination %s searched, though only no_weighting brings the candidate closer", r.Name)
		}
	}
}

// TestSharedEmulations: a deviation that computes what the oracle computes
// on a case (capacity_floor_zero on layer-paper, int(0.5·8) = 4) is given
// the case's arrays without recomputation; computed all the same, it gives
// them within the case's tolerances. On layer-capacity-floor it repeats
// capacity_off_by_one (0.29·100 floors to 28 either way) and shares its
// arrays.
func TestSharedEmulations(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	d, _ := findLayerDeviation("capacity_floor_zero")
	arrays, err := layerArrays(c, s, &d)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compare(c, candidateOf(&format.Case{Manifest: c.Manifest, Arrays: arrays}), false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass {
		t.Errorf("capacity_floor_zero computed on layer-paper differs from the case")
	}
	ems, err := emulate(c, nil, nil) // not the shared cache: its arrays may come from another load of the case
	if err != nil {
		t.Fatal(err)
	}
	em := find(t, ems, "capacity_floor_zero")
	if em.arrays["expected.out"] != c.Arrays["expected.out"] {
		t.Errorf("capacity_floor_zero on layer-paper was recomputed, not taken from the case")
	}
	floor := loadCase(t, "layer-capacity-floor")
	ems = []emulation{{name: "capacity_off_by_one"}, {name: "capacity_floor_zero"}}
	devs := make([]layerDeviation, 2)
	devs[0], _ = findLayerDeviation("capacity_off_by_one")
	devs[1], _ = findLayerDeviation("capacity_floor_zero")
	if err := shareEffective(floor, devs, ems, []spec.Config{*floor.Manifest.Config.Layer}); err != nil {
		t.Fatal(err)
	}
	if ems[0].repeats != 0 || ems[1].repeats != 1 {
		t.Errorf("repeats %d, %d; want capacity_floor_zero to repeat capacity_off_by_one", ems[0].repeats, ems[1].repeats)
	}
}

// TestDecodeWindowConsistent: a model whose routed layers count the window
// in gathered indices decodes, counting it in cache slots, to the logits of
// its own full forward, as a correct model does; the two emulations (the
// layer's regathered block, the decoder fed at cache slots) are made
// independently. And they differ from the oracle's on decode-window.
func TestDecodeWindowConsistent(t *testing.T) {
	c := loadCase(t, "decode-window")
	em := find(t, emulated(t, c), "window_gathered_indices")
	full, dec := em.arrays["expected.logits"], em.arrays["expected.decode_logits"]
	for i := range full.F {
		if math.Abs(full.F[i]-dec.F[i]) > 1e-9 {
			t.Fatalf("logit %d: full forward %v, decoding %v", i, full.F[i], dec.F[i])
		}
	}
	if slices.Equal(full.F, c.Arrays["expected.logits"].F) {
		t.Error("the deviant full forward equals the oracle's: the case shows nothing")
	}
}

// TestNoCausalMaskLastToken: without a causal mask the last selected token
// of a row still attends to exactly the tokens it attends to with one, so
// its update is ref's; the first one, which then sees every later token,
// differs.
func TestNoCausalMaskLastToken(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	dr, err := layerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := findLayerDeviation("no_causal_mask")
	var st layerState
	l, err := d.run(s.cfg, dr.p, dr.in, &st)
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

func floats(a, b []float64, tol float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

// TestInputGradientShortWay: grad.input.x with the tokens outside the
// selection taken the short way (u_i plus the finite difference of the
// auxiliary loss alone) agrees with the full finite differences of the
// loss, for the oracle and for deviations that change what the auxiliary
// loss reads (a live predictor input, other targets, another selection).
func TestInputGradientShortWay(t *testing.T) {
	for _, tc := range []struct{ name, deviation string }{
		{"layer-router-bce", ""},
		{"layer-router-bce", "targets_first_row"},
		{"layer-predictor", "predictor_no_stopgrad"},
		{"layer-predictor", "predictor_block_output"},
		{"layer-padding", "capacity_off_by_one"},
		{"layer-causal-predictor", "residual_twice"},
		{"layer-router-bce", "gather_first_k"},
	} {
		c := loadCase(t, tc.name)
		s := layerSpecOf(c)
		var d layerDeviation
		if tc.deviation != "" {
			d, _ = findLayerDeviation(tc.deviation)
		}
		grads := make([][]float64, 2)
		for k, skip := range []bool{false, true} {
			dr, err := layerDrawOf(c, s)
			if err != nil {
				t.Fatal(err)
			}
			var st layerState
			loss := func() (float64, error) {
				l, err := d.run(s.cfg, dr.p, dr.in, &st)
				if err != nil {
					return 0, err
				}
				return dot(l.out, dr.u) + l.res.AuxLoss, nil
			}
			if _, err := loss(); err != nil {
				t.Fatal(err)
			}
			if grads[k], err = inputGradient(s, &dr, &d, &st, loss, skip); err != nil {
				t.Fatal(err)
			}
		}
		differ := 0
		for i := range grads[0] {
			if math.Abs(grads[0][i]-grads[1][i]) > 1e-8 {
				t.Fatalf("%s %s: grad.input.x[%d] full %v, short %v", tc.name, tc.deviation, i, grads[0][i], grads[1][i])
			}
			if grads[0][i] != grads[1][i] {
				differ++
			}
		}
		if differ == 0 {
			t.Errorf("%s %s: the short way was not taken", tc.name, tc.deviation)
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
	if err := loadParams(c, p.Tensors("")); err != nil {
		t.Fatal(err)
	}
	s, d, width, ke := c.Manifest.Config.SeqLen, cfg.Block.D, cfg.GateWidth(), choice.Shape[2]
	none, one := 0, 0
	for b, xb := range matrices(x) {
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

// TestCorpusGradientsAreTheFiniteDifferences: every gradient array of the
// corpus, which the generator takes from ref's analytic backward passes,
// agrees within emulatedGradTol of max(‖e‖∞, 1) with the central
// differences of ref's frozen forward that generated the corpus before
// (the oracle emulation's, for MoDE cases FDGradient of
// MoDEForwardFrozen): the finite differences are the corpus's test.
func TestCorpusGradientsAreTheFiniteDifferences(t *testing.T) {
	if testing.Short() {
		t.Skip("central differences of every case take seconds; -short skips them")
	}
	names, err := format.List("corpus")
	if err != nil {
		t.Fatal(err)
	}
	var oracle layerDeviation
	worst, where := 0.0, ""
	for _, name := range names {
		c := loadCase(t, name)
		var arrays map[string]*format.Array
		switch c.Manifest.Kind {
		case format.KindLayer:
			arrays, err = layerArraysFD(c, layerSpecOf(c), &oracle)
		case format.KindModel:
			arrays, err = modelArraysFD(c, modelSpecOf(c), &oracle)
		case format.KindMoDE:
			arrays, err = modeFDGradients(c)
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, info := range c.Manifest.Arrays {
			if !strings.HasPrefix(info.Name, "grad.") {
				continue
			}
			got, want := arrays[info.Name], c.Arrays[info.Name]
			if got == nil {
				t.Errorf("%s: %s not computed", name, info.Name)
				continue
			}
			scale := math.Max(1, maxAbs(want.F))
			for k := range want.F {
				d := math.Abs(got.F[k]-want.F[k]) / scale
				if !(d <= emulatedGradTol) {
					t.Errorf("%s: %s%v = %v by finite differences, stored %v (difference %.3g of max(‖e‖∞, 1), bound %.3g)", name, info.Name, want.Index(k), got.F[k], want.F[k], d, emulatedGradTol)
					break
				}
				if d > worst {
					worst, where = d, name+" "+info.Name
				}
			}
		}
	}
	t.Logf("largest difference %.3g of max(‖e‖∞, 1) (%s)", worst, where)
}

// modeFDGradients returns a MoDE case's gradients by central differences
// of ref.MoDEForwardFrozen with the case's decision frozen.
func modeFDGradients(c *format.Case) (map[string]*format.Array, error) {
	s := modeSpecOf(c)
	dr, err := modeDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	res, err := ref.MoDEForward(s.cfg, dr.p, dr.x)
	if err != nil {
		return nil, err
	}
	loss := func() (float64, error) {
		r, err := ref.MoDEForwardFrozen(s.cfg, dr.p, dr.x, res.Frozen)
		if err != nil {
			return 0, err
		}
		return dot(r.Out, dr.u), nil
	}
	arrays := map[string]*format.Array{}
	var gx []float64
	for _, x := range dr.x {
		g, err := ref.FDGradient(loss, x.RawMatrix().Data, ref.FDStep)
		if err != nil {
			return nil, err
		}
		gx = append(gx, g...)
	}
	arrays["grad.input.x"] = format.Float(gx, s.batch, s.seqLen, s.cfg.Block.D)
	for _, p := range dr.p.Tensors("") {
		g, err := gradient(loss, p.Data, p.Shape)
		if err != nil {
			return nil, err
		}
		arrays["grad.param."+p.Name] = g
	}
	return arrays, nil
}
