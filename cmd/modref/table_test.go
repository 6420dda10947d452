package main

import (
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestCheckRanksByExcess checks that check's table puts the array furthest
// outside its tolerance first, with its error over tolerance, even when
// another array has the larger absolute error, and names a passing case's
// worst array by the same measure.
func TestCheckRanksByExcess(t *testing.T) {
	c, err := format.Load(corpus, "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	var out, wq *format.Tolerance
	for _, info := range c.Manifest.Arrays {
		switch info.Name {
		case "expected.out":
			out = info.Tolerance
		case "grad.param.Wq":
			wq = info.Tolerance
		}
	}
	// grad.param.Wq off by 5 tolerances at one element, out by 10 tolerances
	// at one, a smaller absolute error.
	var wqAbs, outAbs float64
	bad := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		a := m["grad.param.Wq"]
		wqAbs = 5 * (wq.ATol + wq.RTol*math.Abs(a.F[5]))
		a.F[5] += wqAbs
		o := m["out"]
		outAbs = 10 * (out.ATol + out.RTol*math.Abs(o.F[0]))
		o.F[0] += outAbs
	})
	if !(wqAbs > outAbs) {
		t.Fatalf("the test wants Wq's absolute error (%g) above out's (%g)", wqAbs, outAbs)
	}
	code, stdout, stderr := runCmd("check", "--corpus", corpus, "--candidate", bad, "layer-paper")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	var lines []string // the table's header and array lines
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "case ") || strings.HasPrefix(l, "layer-paper ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 || !strings.Contains(lines[0], "error/tol") ||
		!strings.HasPrefix(lines[1], "layer-paper  out ") || !strings.Contains(lines[1], " 10 ") ||
		!strings.Contains(lines[2], "grad.param.Wq") || !strings.Contains(lines[2], " 5 ") {
		t.Errorf("want out (10× its tolerance) ranked above grad.param.Wq (5×, a larger absolute error):\n%s", stdout)
	}
}
