package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden"
)

// TestCheckSamePositionsWrongOrder: selected holding the oracle's positions
// of a row in another order is a failure that check describes as such, not
// as a routing flip; the other row is not mentioned.
func TestCheckSamePositionsWrongOrder(t *testing.T) {
	path := writeCandidate(t, "layer-paper", func(m map[string]*golden.Array) {
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
	optional := writeCandidate(t, "layer-paper", func(m map[string]*golden.Array) {
		delete(m, "weights")
		delete(m, "multipliers")
		delete(m, "targets")
	})
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", optional, "layer-paper")
	if code != 0 || !strings.Contains(out, "not judged, left out by the candidate: weights, multipliers, targets") ||
		!strings.Contains(out, "verdict: the candidate matches the oracle") {
		t.Errorf("optional arrays left out: exit %d\n%s%s", code, out, errOut)
	}
	partial := writeCandidate(t, "layer-paper", func(m map[string]*golden.Array) { delete(m, "grad.param.Wq") })
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--candidate", partial, "layer-paper")
	if code != 2 || !strings.Contains(errOut, `"grad.param.Wq" is missing`) || !strings.Contains(errOut, "--allow-missing") {
		t.Errorf("a required array left out: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd("diagnose", "-dir", corpus, "--allow-missing", "--candidate", partial, "layer-paper")
	if code != 1 || !strings.Contains(out, "not judged, left out by the candidate: grad.param.Wq") ||
		!strings.Contains(out, "verdict: the candidate matches the oracle on the arrays it has, but lacks 1 the case requires (grad.param.Wq): not a pass") {
		t.Errorf("--allow-missing: exit %d\n%s%s", code, out, errOut)
	}
}
