package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
)

// TestCheckSamePositionsWrongOrder: selected holding the oracle's positions
// of a row in another order is a failure that check describes as such, not
// as a routing flip; the other row is not mentioned.
func TestCheckSamePositionsWrongOrder(t *testing.T) {
	path := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		sel := *m["selected"]
		sel.I = slices.Clone(sel.I)
		k := sel.Shape[1]
		slices.Reverse(sel.I[:k])
		m["selected"] = &sel
	})
	code, out, _ := runCmd("check", "-dir", corpus, "--candidate", path, "layer-paper")
	if code != 1 || !strings.Contains(out, "row 0: same positions, wrong order") ||
		strings.Contains(out, "row 1:") || strings.Contains(out, "routed only by") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

// TestDiagnoseAllowMissing: a candidate without the arrays a port need not
// compute is diagnosed on the others; one without a required array is bad
// input whose message names --allow-missing, and with it is judged on the
// arrays it has, listed, and still not a pass.
func TestDiagnoseAllowMissing(t *testing.T) {
	optional := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		delete(m, "weights")
		delete(m, "multipliers")
		delete(m, "targets")
	})
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", optional, "layer-paper")
	if code != 0 || !strings.Contains(out, "not judged, left out by the candidate: weights, multipliers, targets") ||
		!strings.Contains(out, "verdict: the candidate matches the oracle") {
		t.Errorf("optional arrays left out: exit %d\n%s%s", code, out, errOut)
	}
	partial := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) { delete(m, "grad.param.Wq") })
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--candidate", partial, "layer-paper")
	if code != 2 || !strings.Contains(errOut, `"grad.param.Wq" is missing`) || !strings.Contains(errOut, "--allow-missing") {
		t.Errorf("a required array left out: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--allow-missing", "--candidate", partial, "layer-paper")
	if code != 1 || !strings.Contains(out, "not judged, left out by the candidate: grad.param.Wq") ||
		!strings.Contains(out, "verdict: the candidate matches the oracle on the arrays it has, but lacks 1 the case requires (grad.param.Wq): not a pass") {
		t.Errorf("--allow-missing: exit %d\n%s%s", code, out, errOut)
	}
	// A missing array is no departure: the wrong one is.
	wrong := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		delete(m, "out")
		g := *m["grad.param.Wq"]
		g.F = make([]float64, len(g.F))
		m["grad.param.Wq"] = &g
	})
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--allow-missing", "--candidate", wrong, "layer-paper")
	if code != 1 || !strings.Contains(out, "where it first departs, in the order the layers compute: gradients (grad.param.Wq)") {
		t.Errorf("--allow-missing, out missing, grad.param.Wq wrong: exit %d\n%s%s", code, out, errOut)
	}
}

// TestDiagnoseSaysWhereItDeparts: for a bug no deviation names, of this
// test's making (the router's gradient lost, as a detached weight loses
// it, and the output wrong at the first selected token of each row),
// diagnose says where the candidate first departs, in text and in --json.
func TestDiagnoseSaysWhereItDeparts(t *testing.T) {
	path := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		g := *m["grad.param.Router"]
		g.F = make([]float64, len(g.F))
		m["grad.param.Router"] = &g
	})
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", path, "layer-paper")
	want := "where it first departs, in the order the layers compute: gradients (grad.param.Router): zero everywhere, where the oracle's is not"
	if code != 1 || !strings.Contains(out, "no known deviation explains it") || !strings.Contains(out, want) ||
		!strings.Contains(out, "every array after it is within tolerance") {
		t.Errorf("router gradient lost: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--json", "--candidate", path, "layer-paper")
	var got struct {
		Pass  bool     `json:"pass"`
		Named []string `json:"named"`
		Stage struct {
			Stage, Array, How string
			Layer             int
		} `json:"stage"`
		Results []struct{ Name string } `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 1 {
		t.Fatalf("--json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if got.Pass || len(got.Named) != 0 || got.Stage.Stage != "gradients" || got.Stage.Array != "grad.param.Router" || got.Stage.Layer != -1 ||
		len(got.Results) == 0 || got.Results[0].Name != diagnose.OracleName {
		t.Errorf("--json: %+v", got)
	}
}
