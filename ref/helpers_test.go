package ref

import (
	"math"
	"testing"
)

// closeTo reports whether got and want differ by at most tol*max(1,|want|).
func closeTo(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// assertClose fails with the index and the difference of every element of got
// that is not within tol (relative to max(1,|want|)) of want.
func assertClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !closeTo(got[i], want[i], tol) || math.IsNaN(got[i]) != math.IsNaN(want[i]) {
			t.Errorf("%s[%d] = %.17g, want %.17g (difference %.3g, tolerance %.3g relative)", what, i, got[i], want[i], got[i]-want[i], tol)
		}
	}
}

// assertScalar is assertClose for one value.
func assertScalar(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	assertClose(t, what, []float64{got}, []float64{want}, tol)
}
