package diagnose

import (
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
)

// without returns the candidate with the named arrays left out.
func without(cand map[string]*format.Array, names ...string) map[string]*format.Array {
	out := make(map[string]*format.Array, len(cand))
	for n, a := range cand {
		if !slices.Contains(names, n) {
			out[n] = a
		}
	}
	return out
}

// TestCompareOptionalArrays: a layer case's weights and multipliers may be
// left out, and its targets where no loss reads them; they are listed as
// absent, not judged, and the rest still decides. Targets a loss reads, a
// model case's arrays and everything else stay required.
func TestCompareOptionalArrays(t *testing.T) {
	c := loadCase(t, "layer-paper")
	res, err := judge.Compare(c, without(c.Candidate(), "weights", "multipliers", "targets"), false)
	if err != nil || !res.Pass || !slices.Equal(res.Absent, []string{"weights", "multipliers", "targets"}) {
		t.Fatalf("layer-paper without weights, multipliers, targets: %v, pass %v, absent %v", err, res != nil && res.Pass, res)
	}
	for _, a := range res.Arrays {
		if slices.Contains(res.Absent, a.Name) {
			t.Errorf("%s is absent and judged", a.Name)
		}
	}
	bad := without(c.Candidate(), "weights")
	bad["out"].F[0] += 1
	if res, err := judge.Compare(c, bad, false); err != nil || res.Pass {
		t.Errorf("a wrong out passes when weights are left out (%v)", err)
	}
	bce := loadCase(t, "layer-router-bce")
	if _, err := judge.Compare(bce, without(bce.Candidate(), "targets"), false); err == nil || !strings.Contains(err.Error(), `"targets" is missing`) {
		t.Errorf("layer-router-bce (router_bce, weight 0.1) without targets: error %v, want targets missing", err)
	}
	for _, name := range []string{"expected.out", "expected.selected", "expected.router_logits", "grad.input.x"} {
		if judge.Optional(c, name) {
			t.Errorf("%s is optional", name)
		}
	}
	// A model case: each routed layer's per-layer arrays
	// (oracle.LayerStageArrays) and nothing else.
	m := loadCase(t, "model-every-other")
	var stages []string
	for _, info := range m.Manifest.Arrays {
		name := format.CandidateName(info.Name)
		_, stage, _ := strings.Cut(name, ".")
		want := info.Role == format.RoleExpected && strings.HasPrefix(name, "L") && slices.Contains(oracle.LayerStageArrays, stage)
		if got := judge.Optional(m, info.Name); got != want {
			t.Errorf("model case: %s optional %v, want %v", info.Name, got, want)
		}
		if want {
			stages = append(stages, name)
		}
	}
	if len(stages) != 8 {
		t.Fatalf("model-every-other (two routed layers) has per-layer arrays %v, want 8", stages)
	}
	res, err = judge.Compare(m, without(m.Candidate(), stages...), false)
	if err != nil || !res.Pass || len(res.Absent) != 8 {
		t.Errorf("model-every-other without its per-layer arrays: %v, %+v", err, res)
	}
	bad = m.Candidate()
	bad["L2.weights"].F[0] += 1
	if res, err := judge.Compare(m, bad, false); err != nil || res.Pass {
		t.Errorf("a wrong L2.weights written passes (%v)", err)
	}
}

// TestDiagnoseJudgesAbsentArraysAsAbsent: a deviation that shows only in
// arrays the candidate left out cannot be seen through it; a candidate
// without the optional arrays is diagnosed on the others (a port's
// returned residual still named); with AllowMissing a required array left
// out is absent too, and without it, bad input.
func TestDiagnoseJudgesAbsentArraysAsAbsent(t *testing.T) {
	c := loadCase(t, "layer-paper")
	rs, err := Diagnose(c, without(c.Candidate(), "weights", "multipliers", "targets"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Match || rs[0].Total != 15 {
		t.Errorf("oracle: match %v, %d arrays judged, want a match on 15", rs[0].Match, rs[0].Total)
	}
	for _, r := range rs[1:] {
		if r.Name == "targets_first_row" && r.Distinct {
			t.Error("targets_first_row, which changes only targets here, is distinct through a candidate without targets")
		}
		if r.Match && r.Distinct {
			t.Errorf("%s matches the oracle's values", r.Name)
		}
	}
	dev, err := DeviantCandidate(c, "residual_scaled", "")
	if err != nil {
		t.Fatal(err)
	}
	rs, err = Diagnose(c, without(dev, "weights", "multipliers", "targets"))
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); !slices.Equal(got, []string{"residual_scaled"}) {
		t.Errorf("residual_scaled without the optional arrays: matched %v", got)
	}
	partial := without(c.Candidate(), "grad.param.Wq", "grad.input.x")
	if _, err := Diagnose(c, partial); err == nil || !strings.Contains(err.Error(), "--allow-missing") {
		t.Errorf("a required array left out: error %v, want one suggesting --allow-missing", err)
	}
	rs, err = DiagnoseWithOptions(c, partial, DiagnoseOptions{AllowMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Match || !slices.Equal(rs[0].Absent, []string{"grad.input.x", "grad.param.Wq"}) && !slices.Equal(rs[0].Absent, []string{"grad.param.Wq", "grad.input.x"}) {
		t.Errorf("with AllowMissing: match %v, absent %v", rs[0].Match, rs[0].Absent)
	}
}
