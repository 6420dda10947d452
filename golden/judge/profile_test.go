package judge

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

func TestParseProfile(t *testing.T) {
	for _, name := range []string{"float64", "float32", "tf32", "bf16", "fp16"} {
		p, err := format.ParseProfile(name)
		if err != nil || p.Name != name || p.IsZero() {
			t.Errorf("ParseProfile(%q) = %+v, %v", name, p, err)
		}
	}
	if p, err := format.ParseProfile(""); err != nil || !p.IsZero() {
		t.Errorf(`ParseProfile("") = %+v, %v; want the zero profile`, p, err)
	}
	for _, bad := range []string{"bfloat16", "BF16", "float16", "fp8", " bf16"} {
		if _, err := format.ParseProfile(bad); err == nil || !strings.Contains(err.Error(), "bf16") {
			t.Errorf("ParseProfile(%q): error %v, want one listing the profiles", bad, err)
		}
	}
}

// expectedAsCandidate returns the case's expected arrays under candidate
// names, copied, for a test to perturb.
func expectedAsCandidate(c *format.Case) map[string]*format.Array {
	out := map[string]*format.Array{}
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			a := c.Arrays[info.Name]
			out[format.CandidateName(info.Name)] = &format.Array{Shape: a.Shape, F: slices.Clone(a.F), I: slices.Clone(a.I), DType: a.DType}
		}
	}
	return out
}

// TestProfileTolerances holds the rule to its statement on a baseline with
// known errors: atol = Multiple·err + FloorUnits·(Unit·‖e‖∞ + AbsUnit),
// rtol 0, err the largest over the family's members, a scalar that is 0
// held to the floor alone, the margin twice the router logits'
// tolerance, integers exact, and the manifest left as it was.
func TestProfileTolerances(t *testing.T) {
	c, err := format.Load("../corpus", "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	before := *c.Arrays["expected.out"]
	p, _ := format.ParseProfile("bf16")
	base := expectedAsCandidate(c)
	base["out"].F[3] += 0.01
	other := expectedAsCandidate(c)
	other["router_logits"].F[2] -= 0.002
	other["out"].F[5] -= 0.004
	jc, rep, err := Tolerances(p, c, base, other)
	if err != nil {
		t.Fatal(err)
	}
	tolOf := func(name string) format.Tolerance {
		for _, info := range jc.Manifest.Arrays {
			if format.CandidateName(info.Name) == name {
				return *info.Tolerance
			}
		}
		t.Fatalf("no array %s", name)
		return format.Tolerance{}
	}
	scale := func(name string) float64 {
		s := 0.0
		a, ok := c.Arrays["expected."+name]
		if !ok {
			a = c.Arrays[name]
		}
		for _, v := range a.F {
			s = math.Max(s, math.Abs(v))
		}
		return s
	}
	floor := func(name string) float64 { return format.FloorUnits * (p.Unit*scale(name) + p.AbsUnit()) }
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }
	if got, want := tolOf("out"), format.Multiple*0.01+floor("out"); got.RTol != 0 || !near(got.ATol, want) {
		t.Errorf("out: tolerance %+v, want atol %g", got, want)
	}
	rl := tolOf("router_logits")
	if want := format.Multiple*0.002 + floor("router_logits"); !near(rl.ATol, want) {
		t.Errorf("router_logits: atol %g, want %g", rl.ATol, want)
	}
	if got := tolOf("grad.param.Wq"); !near(got.ATol, floor("grad.param.Wq")) {
		t.Errorf("an array the baseline got exactly: atol %g, want the floor %g", got.ATol, floor("grad.param.Wq"))
	}
	// aux.total is 0 in layer-paper: the worst relative forward error
	// (out's) times its scale 0 leaves the floor.
	if got, want := tolOf("aux.total"), floor("aux.total"); !near(got.ATol, want) {
		t.Errorf("aux.total: atol %g, want %g (a scalar of 0 takes the floor)", got.ATol, want)
	}
	if got := tolOf("selected"); got.ATol != 0 || got.RTol != 0 {
		t.Errorf("selected: tolerance %+v, want exact", got)
	}
	if want := flipMarginTols * rl.ATol; !near(jc.Manifest.Routing.Margin, want) || rep.Margin != jc.Manifest.Routing.Margin {
		t.Errorf("margin %g (reported %g), want %g", jc.Manifest.Routing.Margin, rep.Margin, want)
	}
	if c.Manifest.Arrays[0].Tolerance != nil && c.Manifest.Routing.Margin != oracle.RoutingMargin {
		t.Error("Tolerances changed the case's own manifest")
	}
	for _, info := range c.Manifest.Arrays {
		if info.Name == "expected.out" && info.Tolerance.RTol != oracle.ForwardRTol {
			t.Errorf("the case's own out tolerance changed to %+v", info.Tolerance)
		}
	}
	if !slices.Equal(before.F, c.Arrays["expected.out"].F) {
		t.Error("Tolerances changed the case's arrays")
	}
	// The candidate 3.9 baseline errors off passes, 4.1 off fails.
	for _, k := range []float64{3.9, 4.1} {
		cand := expectedAsCandidate(c)
		cand["out"].F[3] += k*0.01 + floor("out")
		res, err := Compare(jc, cand, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pass != (k < format.Multiple) {
			t.Errorf("out off by %g baseline errors + the floor: pass %v", k, res.Pass)
		}
	}
}

// TestProfileRefusesABadBaseline: a baseline that lacks an array or
// overflowed is an error naming it, not a tolerance.
func TestProfileRefusesABadBaseline(t *testing.T) {
	c, err := format.Load("../corpus", "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := format.ParseProfile("fp16")
	base := expectedAsCandidate(c)
	delete(base, "grad.param.Wk")
	if _, _, err := Tolerances(p, c, base); err == nil || !strings.Contains(err.Error(), "grad.param.Wk") {
		t.Errorf("missing array: %v", err)
	}
	base = expectedAsCandidate(c)
	base["out"].F[0] = math.Inf(1)
	if _, _, err := Tolerances(p, c, base); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("infinite baseline: %v", err)
	}
}

// TestPredictorAccuracyNearTies: a predictor logit within the near-tie
// margin of 0 is a token whose sign a correct implementation may get
// either way, and the accuracy allows it: one such token of count widens
// the accuracy's atol to 1/count; none leaves it.
func TestPredictorAccuracyNearTies(t *testing.T) {
	c, err := format.Load("../corpus", "layer-predictor")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := format.ParseProfile("float32")
	accuracyTol := func(c *format.Case) float64 {
		jc, _, err := Tolerances(p, c, expectedAsCandidate(c))
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range jc.Manifest.Arrays {
			if info.Name == "expected.predictor_accuracy" {
				return info.Tolerance.ATol
			}
		}
		t.Fatal("no predictor_accuracy")
		return 0
	}
	q := c.Arrays["expected.predictor_logits"]
	before := accuracyTol(c)
	count := 0
	for k := range q.F {
		if judged(c, q.Shape, k) {
			count++
		}
	}
	if before >= 1/float64(count) {
		t.Fatalf("layer-predictor's accuracy allows %g already: pick a case without near-zero predictor logits", before)
	}
	near := *c
	near.Arrays = maps.Clone(c.Arrays)
	nq := &format.Array{Shape: q.Shape, F: slices.Clone(q.F), DType: q.DType}
	nq.F[0] = 1e-9
	near.Arrays["expected.predictor_logits"] = nq
	if got, want := accuracyTol(&near), 1/float64(count); got != want {
		t.Errorf("one predictor logit 1e-9 from 0: accuracy atol %g, want 1/%d", got, count)
	}
}
