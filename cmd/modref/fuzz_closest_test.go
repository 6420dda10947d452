package main

import (
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// TestCloserKeepsTheLargestRatio checks closest_pass's bookkeeping: across
// cases, the array whose error is the largest share of its tolerance, an
// exact array (ratio 0) never displacing it, and a later case replacing it
// only when closer.
func TestCloserKeepsTheLargestRatio(t *testing.T) {
	tol := format.Tolerance{ATol: 1e-3, RTol: 0}
	arr := func(name string, got, want float64) judge.ArrayResult {
		return judge.ArrayResult{Name: name, Status: judge.StatusPass, Got: got, Want: want, Tolerance: tol}
	}
	c := closer(nil, "a", &judge.CaseResult{Arrays: []judge.ArrayResult{arr("loss", 1, 1+2e-4), arr("logits", 0.5, 0.5+6e-4), arr("selected", 3, 3)}})
	if c == nil || c.Case != "a" || c.Array != "logits" || c.Ratio < 0.59 || c.Ratio > 0.61 {
		t.Fatalf("after case a: %+v, want a's logits at 0.6", c)
	}
	c = closer(c, "b", &judge.CaseResult{Arrays: []judge.ArrayResult{arr("loss", 1, 1+5e-4)}})
	if c.Case != "a" || c.Array != "logits" {
		t.Errorf("case b at 0.5 replaced a's 0.6: %+v", c)
	}
	c = closer(c, "c", &judge.CaseResult{Arrays: []judge.ArrayResult{arr("grad.param.Wq", 2, 2-9e-4)}})
	if c.Case != "c" || c.Array != "grad.param.Wq" || c.Ratio < 0.89 || c.Ratio > 0.91 {
		t.Errorf("case c at 0.9 did not replace a's 0.6: %+v", c)
	}
}
