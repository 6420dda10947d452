package judge

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
)

func loadCase(t *testing.T, name string) *format.Case {
	t.Helper()
	c, err := format.Load("../corpus", name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func result(t *testing.T, r *CaseResult, name string) ArrayResult {
	t.Helper()
	for _, a := range r.Arrays {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no result for %s", name)
	return ArrayResult{}
}

func TestComparePerfectCandidatePasses(t *testing.T) {
	for _, name := range []string{"layer-paper", "layer-padding", "model-every-other", "decode-router"} {
		c := loadCase(t, name)
		r, err := Compare(c, c.Candidate(), false)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Pass {
			t.Errorf("%s: the case's own values fail: %+v", name, r.Arrays)
		}
	}
}

func TestCompareFindsTheWorstElement(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand := c.Candidate()
	out := cand["out"]
	k := 1*8*8 + 3*8 + 5 // element [1 3 5]
	tol := result(t, mustCompare(t, c, c.Candidate()), "out").Tolerance
	bound := tol.ATol + tol.RTol*math.Abs(out.F[k])
	out.F[k] += 2 * bound
	out.F[0] += 0.5 * (tol.ATol + tol.RTol*math.Abs(out.F[0])) // inside the tolerance
	r := mustCompare(t, c, cand)
	a := result(t, r, "out")
	if r.Pass || a.Status != StatusFail {
		t.Fatalf("a change of twice the tolerance passed: %+v", a)
	}
	if !slices.Equal(a.Where, []int{1, 3, 5}) || math.Abs(a.MaxAbs-2*bound) > 1e-12 {
		t.Errorf("worst element %v with error %v, want [1 3 5] with %v", a.Where, a.MaxAbs, 2*bound)
	}
	if other := result(t, r, "router_logits"); other.Status != StatusPass {
		t.Errorf("router_logits was not changed but fails: %+v", other)
	}
}

func TestCompareIgnoresPaddedPositions(t *testing.T) {
	c := loadCase(t, "layer-padding") // row 1 has 6 valid tokens of 10
	cand := c.Candidate()
	cand["router_logits"].F[1*10+7] += 100
	cand["out"].F[(1*10+9)*8] += 100
	if r := mustCompare(t, c, cand); !r.Pass {
		t.Errorf("changes at padded positions failed the case: %+v", r.Arrays)
	}
	cand["router_logits"].F[1*10+5] += 100
	if r := mustCompare(t, c, cand); result(t, r, "router_logits").Status != StatusFail {
		t.Error("a change at a valid position passed")
	}
}

func TestCompareReportsRoutingMismatch(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand := c.Candidate()
	sel := cand["selected"]
	k := sel.Shape[1]
	want := slices.Clone(sel.I[:k])
	// Swap the oracle's weakest selected token in row 0 for its strongest
	// unselected one.
	r := c.Arrays["expected.router_logits"].F[:8]
	weakest, strongest := -1, -1
	for i := 0; i < 8; i++ {
		if slices.Contains(want, int64(i)) {
			if weakest < 0 || r[i] < r[weakest] {
				weakest = i
			}
		} else if strongest < 0 || r[i] > r[strongest] {
			strongest = i
		}
	}
	row := slices.DeleteFunc(slices.Clone(want), func(p int64) bool { return p == int64(weakest) })
	row = append(row, int64(strongest))
	slices.Sort(row)
	copy(sel.I[:k], row)
	res := result(t, mustCompare(t, c, cand), "selected")
	if res.Status != StatusFail || len(res.Routing) != 1 {
		t.Fatalf("routing change not reported: %+v", res)
	}
	m := res.Routing[0]
	if m.Row != 0 || !slices.Equal(m.OnlyCandidate, []int{strongest}) || !slices.Equal(m.OnlyOracle, []int{weakest}) {
		t.Errorf("mismatch %+v, want row 0, candidate-only [%d], oracle-only [%d]", m, strongest, weakest)
	}
	if gap := r[weakest] - r[strongest]; math.Abs(m.Gap-gap) > 1e-15 || m.NearTie != (gap < c.Manifest.Routing.Margin) {
		t.Errorf("gap %v near-tie %v, want %v", m.Gap, m.NearTie, gap)
	}
}

func TestCompareBadCandidates(t *testing.T) {
	c := loadCase(t, "layer-paper")
	for _, tc := range []struct {
		name string
		edit func(map[string]*format.Array)
		want string
	}{
		{"missing", func(m map[string]*format.Array) { delete(m, "grad.param.Wq") }, `array "grad.param.Wq" is missing: the case expects shape [`},
		{"shape", func(m map[string]*format.Array) { m["out"].Shape = []int{2, 64} }, `array "out" has shape [2 64], want [2 8 8]`},
		{"nan", func(m map[string]*format.Array) { m["aux.total"].F[0] = math.NaN() }, `array "aux.total" holds NaN`},
		{"inf", func(m map[string]*format.Array) { m["out"].F[9] = math.Inf(-1) }, `array "out" holds -Inf at [0 1 1]`},
		{"float selected", func(m map[string]*format.Array) {
			s := m["selected"]
			m["selected"] = &format.Array{Shape: s.Shape, F: make([]float64, len(s.I)), DType: "<f4"}
		}, `array "selected" has dtype <f4, want integers (<i8`},
		{"float out as integers", func(m map[string]*format.Array) {
			o := m["out"]
			m["out"] = &format.Array{Shape: o.Shape, I: make([]int64, len(o.F)), DType: "<i8"}
		}, `array "out" has dtype <i8, want floating point (<f8`},
		{"integer targets beyond 0/1", func(m map[string]*format.Array) {
			tg := m["targets"]
			m["targets"] = &format.Array{Shape: tg.Shape, I: make([]int64, len(tg.F)), DType: "<i8"}
			m["targets"].I[3] = 2
		}, `array "targets" has dtype <i8, want floating point (<f8`},
	} {
		cand := c.Candidate()
		tc.edit(cand)
		_, err := Compare(c, cand, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	cand := c.Candidate()
	delete(cand, "grad.param.Wq")
	r, err := Compare(c, cand, true)
	if err != nil || r.Pass || result(t, r, "grad.param.Wq").Status != StatusMissing {
		t.Errorf("with allowMissing: %v, %+v", err, r)
	}
}

func mustCompare(t *testing.T, c *format.Case, cand map[string]*format.Array) *CaseResult {
	t.Helper()
	r, err := Compare(c, cand, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCompareSelectedOfAnotherWidth checks that a candidate selecting a
// different number of tokens is a routing mismatch, not bad input, and that
// extra −1 padding alone is no mismatch.
func TestCompareSelectedOfAnotherWidth(t *testing.T) {
	c := loadCase(t, "layer-paper")
	want := c.Arrays["expected.selected"]
	rows, k := want.Shape[0], want.Shape[1]
	narrow := &format.Array{Shape: []int{rows, k - 1}, DType: "<i8"}
	wide := &format.Array{Shape: []int{rows, k + 1}, DType: "<i8"}
	for b := 0; b < rows; b++ {
		narrow.I = append(narrow.I, want.I[b*k:b*k+k-1]...)
		wide.I = append(append(wide.I, want.I[b*k:(b+1)*k]...), -1)
	}
	cand := c.Candidate()
	cand["selected"] = wide
	if r := result(t, mustCompare(t, c, cand), "selected"); r.Status != StatusPass {
		t.Errorf("extra -1 padding: %+v", r)
	}
	cand["selected"] = narrow
	r := result(t, mustCompare(t, c, cand), "selected")
	if r.Status != StatusFail || len(r.Routing) != rows {
		t.Fatalf("k-1 tokens per row: %+v", r)
	}
	// The row of the table shows the first differing element, the narrower
	// array read as padded with −1: the oracle's last position.
	if !slices.Equal(r.Where, []int{0, k - 1}) || r.Got != -1 || r.Want != float64(want.I[k-1]) {
		t.Errorf("k-1 tokens per row: where %v got %v want %v, want [0 %d] -1 %d", r.Where, r.Got, r.Want, k-1, want.I[k-1])
	}
	for b, m := range r.Routing {
		if len(m.OnlyCandidate) != 0 || len(m.OnlyOracle) != 1 || int64(m.OnlyOracle[0]) != want.I[b*k+k-1] {
			t.Errorf("row %d: %+v, want only the oracle's last position %d", b, m, want.I[b*k+k-1])
		}
	}
}

// TestCompareIntegerTargets: targets is a 0/1 mask stored as float64; a
// candidate may give it as integers 0 and 1, judged the same.
func TestCompareIntegerTargets(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand := c.Candidate()
	tg := cand["targets"]
	it := &format.Array{Shape: tg.Shape, DType: "<i4"}
	for _, v := range tg.F {
		it.I = append(it.I, int64(v))
	}
	cand["targets"] = it
	if r := mustCompare(t, c, cand); !r.Pass {
		t.Errorf("integer 0/1 targets: %+v", result(t, r, "targets"))
	}
	it.I[0] = 1 - it.I[0]
	if r := result(t, mustCompare(t, c, cand), "targets"); r.Status != StatusFail || len(r.Routing) != 1 {
		t.Errorf("integer targets with one flipped: %+v", r)
	}
}

// TestCompareZeroByConfiguration: aux.total may be left out exactly where the
// configuration makes it 0, and is then judged as 0.
func TestCompareZeroByConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name, array string
		optional    bool
	}{
		{"layer-paper", "aux.total", true},
		{"layer-router-bce", "targets", false}, // layer-paper's may be left out (Optional), not judged as 0
		{"layer-router-bce", "aux.total", false},
		{"layer-load-balance", "aux.total", false},
		{"model-every-other", "L0.aux.total", true},
		{"model-all-layers", "L0.aux.total", false},
	} {
		c := loadCase(t, tc.name)
		if got := ZeroByConfiguration(c, "expected."+tc.array); got != tc.optional {
			t.Errorf("%s %s: ZeroByConfiguration = %v", tc.name, tc.array, got)
		}
		if tc.optional && c.Arrays["expected."+tc.array].F[0] != 0 {
			t.Errorf("%s %s is optional but %v", tc.name, tc.array, c.Arrays["expected."+tc.array].F[0])
		}
		cand := c.Candidate()
		delete(cand, tc.array)
		r, err := Compare(c, cand, false)
		switch {
		case tc.optional && (err != nil || !r.Pass):
			t.Errorf("%s without %s: %v %+v", tc.name, tc.array, err, r)
		case !tc.optional && (err == nil || !strings.Contains(err.Error(), "is missing")):
			t.Errorf("%s without %s: error %v, want it missing", tc.name, tc.array, err)
		}
	}
}

// TestCompareTieRule: on layer-ties a candidate that gives an exactly tied
// boundary to the higher position broke the tie rule; that is no near tie.
func TestCompareTieRule(t *testing.T) {
	c := loadCase(t, "layer-ties")
	cand := c.Candidate()
	sel, r := cand["selected"], c.Arrays["expected.router_logits"]
	s, k := r.Shape[1], sel.Shape[1]
	row := sel.I[:k]
	last := row[0]
	for _, p := range row {
		if r.F[p] <= r.F[last] {
			last = p
		}
	}
	swapped := false
	for i := range s {
		if !slices.Contains(row, int64(i)) && r.F[i] == r.F[last] {
			row[slices.Index(row, last)] = int64(i)
			slices.Sort(row)
			swapped = true
			break
		}
	}
	if !swapped {
		t.Fatal("layer-ties has no exact tie in row 0")
	}
	res := result(t, mustCompare(t, c, cand), "selected")
	if res.Status != StatusFail || len(res.Routing) != 1 {
		t.Fatalf("tie broken the wrong way: %+v", res)
	}
	if m := res.Routing[0]; !m.Tie || m.NearTie || m.Gap != 0 {
		t.Errorf("tie broken the wrong way: %+v, want Tie and not NearTie", m)
	}
}

// TestCompareCausalThreshold: layer-causal-threshold has, in each row, a
// router weight of exactly 0, not routed (routed iff r > 0); a candidate
// that routes it broke the rule at its threshold, which no float32
// round-off excuses.
func TestCompareCausalThreshold(t *testing.T) {
	c := loadCase(t, "layer-causal-threshold")
	r, sel := c.Arrays["expected.router_logits"], c.Arrays["expected.selected"]
	s, k := r.Shape[1], sel.Shape[1]
	zero := -1
	for i, v := range r.F[:s] {
		if v == 0 {
			zero = i
		}
	}
	if zero < 0 || slices.Contains(sel.I[:k], int64(zero)) || !c.Manifest.Routing.Ties {
		t.Fatalf("row 0 of layer-causal-threshold: router weight 0 at %d, selected %v, ties %v", zero, sel.I[:k], c.Manifest.Routing.Ties)
	}
	// Row 0 routes the zero weight too, one column wider, padded with −1.
	routed := &format.Array{Shape: []int{sel.Shape[0], k + 1}, DType: "<i8"}
	for b := range sel.Shape[0] {
		row := slices.DeleteFunc(slices.Clone(sel.I[b*k:(b+1)*k]), func(p int64) bool { return p < 0 })
		if b == 0 {
			row = append(row, int64(zero))
			slices.Sort(row)
		}
		for len(row) < k+1 {
			row = append(row, -1)
		}
		routed.I = append(routed.I, row...)
	}
	res := mustCompare(t, c, perfectWith(c, "selected", routed))
	a := result(t, res, "selected")
	if a.Status != StatusFail || len(a.Routing) != 1 {
		t.Fatalf("the zero weight routed: %+v", a)
	}
	if m := a.Routing[0]; !m.Causal || !m.Tie || m.NearTie || !slices.Equal(m.OnlyCandidate, []int{zero}) {
		t.Errorf("the zero weight routed: %+v, want a causal tie at %d", m, zero)
	}
}

// perfectWith is the case's own values with one array replaced.
func perfectWith(c *format.Case, name string, a *format.Array) map[string]*format.Array {
	cand := c.Candidate()
	cand[name] = a
	return cand
}
