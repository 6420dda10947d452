package ref

import (
	"flag"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// gradTol is the bound on |analytic − finite difference| / max(1, |finite
// difference|) for every gradient coordinate of the analytic backward
// passes against ref's own central differences; docs/tolerances.md gives
// the measured largest errors.
const gradTol = 1e-7

var gradReport = flag.Bool("grad.report", false, "log the largest error of each analytic gradient test")

// gradErr tracks the largest normalised difference between analytic and
// finite-difference gradients and where it was.
type gradErr struct {
	worst float64
	where string
}

// compare checks the analytic gradient got of loss with respect to data
// (named name) against central differences D(h) at h = FDStep. Where they
// differ by more than gradTol, the difference may be the truncation error
// h²/6·f‴ of the central difference, large where the loss bends sharply
// (a LayerNorm of two values close together): that coordinate is then
// compared, under the same bound, with the Richardson extrapolation
// (4·D(h) − D(2h))/3, whose truncation error is O(h⁴).
func (e *gradErr) compare(t *rapid.T, name string, got []float64, loss func() (float64, error), data []float64) {
	want, err := FDGradient(loss, data, FDStep)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d analytic values, %d finite differences", name, len(got), len(want))
	}
	for i := range got {
		rel := math.Abs(got[i]-want[i]) / math.Max(1, math.Abs(want[i]))
		if !(rel <= gradTol) {
			d2, err := FDDerivative(loss, data, i, 2*FDStep)
			if err != nil {
				t.Fatal(err)
			}
			r := (4*want[i] - d2) / 3
			rel2 := math.Abs(got[i]-r) / math.Max(1, math.Abs(r))
			if !(rel2 <= gradTol) {
				t.Fatalf("%s[%d]: analytic %.17g, finite differences %.17g (error %.3g), extrapolated %.17g (error %.3g), bound %.3g",
					name, i, got[i], want[i], rel, r, rel2, gradTol)
			}
			rel = rel2
		}
		if rel > e.worst {
			e.worst, e.where = rel, name
		}
	}
}

// report logs the largest error with -grad.report.
func (e *gradErr) report(t *testing.T) {
	if *gradReport {
		t.Logf("largest error %.3g (%s)", e.worst, e.where)
	}
}
