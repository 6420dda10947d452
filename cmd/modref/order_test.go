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
