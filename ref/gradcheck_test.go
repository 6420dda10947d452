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
const gradTol = 1e-6

var gradReport = flag.Bool("grad.report", false, "log the largest error of each analytic gradient test")

// gradErr tracks the largest normalised difference between analytic and
// finite-difference gradients and where it was.
type gradErr struct {
	worst float64
	where string
}

// gradCoords is the number of coordinates of each array whose gradient
// compare checks: all of a smaller array, so many drawn ones of a larger,
// so that the tests stay quick enough for CI's arm64 run under emulation.
const gradCoords = 12

// compare checks the analytic gradient got of loss with respect to data
// (named name) against central differences D(h) at h = FDStep, at every
// coordinate of a short array and at gradCoords drawn ones of a longer.
// Where they differ by more than gradTol, the difference may be the
// truncation error h²/6·f‴ of the central difference, large where the
// loss bends sharply (a LayerNorm of values close together): that
// coordinate is then compared, under the same bound, with Richardson
// extrapolations (extrapolated).
func (e *gradErr) compare(t *rapid.T, name string, got []float64, loss func() (float64, error), data []float64) {
	if len(got) != len(data) {
		t.Fatalf("%s: %d analytic values for %d coordinates", name, len(got), len(data))
	}
	coords := make([]int, len(data))
	for i := range coords {
		coords[i] = i
	}
	if len(data) > gradCoords {
		coords = rapid.SliceOfNDistinct(rapid.IntRange(0, len(data)-1), gradCoords, gradCoords, rapid.ID[int]).Draw(t, name+" coordinates")
	}
	for _, i := range coords {
		want, err := FDDerivative(loss, data, i, FDStep)
		if err != nil {
			t.Fatal(err)
		}
		rel := math.Abs(got[i]-want) / math.Max(1, math.Abs(want))
		if !(rel <= gradTol) {
			rel = e.extrapolated(t, name, got[i], want, rel, loss, data, i)
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

// extrapolated returns the smallest error of the analytic derivative got
// of loss at data[i] against the Richardson extrapolations (4·D(h) −
// D(2h))/3 at h = FDStep, FDStep/4 and FDStep/16, failing t if none is
// within gradTol; fd and rel are the central difference at FDStep and its
// error.
func (e *gradErr) extrapolated(t *rapid.T, name string, got, fd, rel float64, loss func() (float64, error), data []float64, i int) float64 {
	best, bestR := math.Inf(1), 0.0
	for h := FDStep; h >= FDStep/16; h /= 4 {
		d1 := fd
		if h != FDStep {
			var err error
			if d1, err = FDDerivative(loss, data, i, h); err != nil {
				t.Fatal(err)
			}
		}
		d2, err := FDDerivative(loss, data, i, 2*h)
		if err != nil {
			t.Fatal(err)
		}
		r := (4*d1 - d2) / 3
		rel2 := math.Abs(got-r) / math.Max(1, math.Abs(r))
		if rel2 < best {
			best, bestR = rel2, r
		}
		if rel2 <= gradTol {
			return rel2
		}
	}
	t.Fatalf("%s[%d]: analytic %.17g, finite differences %.17g (error %.3g), best extrapolation %.17g (error %.3g), bound %.3g",
		name, i, got, fd, rel, bestR, best, gradTol)
	return best
}
