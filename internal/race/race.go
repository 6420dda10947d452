// Package race tells tests whether the race detector is on, scales the
// wall-time bounds they put on work that must end on its own for the
// detector's slowdown, and skips under -race -short the tests it only
// slows (SkipShort).
//
// A test that catches a hang gives the hanging program a short limit and
// then checks that the run ended within a bound well below the hang
// (a program that sleeps 30 s, a bound of 5 s). Under -race the test
// process, and any test binary it starts as a fake program, runs several
// times slower, and on a loaded 2-core machine a correct run has taken
// over such a bound (issue 37). Limit scales the bound by Factor under
// -race, and a test keeps its hang longer than the scaled bound, so a hang
// is still caught.
package race

import (
	"testing"
	"time"
)

// Factor is how many times longer than without the race detector a test
// allows work that must end on its own to take under it: the detector
// makes Go code 2 to 20 times slower (its documentation), the tests it
// bounds spend most of their time starting processes.
const Factor = 4

// Limit returns d, or d times Factor when the race detector is on.
func Limit(d time.Duration) time.Duration {
	if Enabled {
		return d * Factor
	}
	return d
}

// SkipShort skips t under go test -race -short, saying why: for a test
// the race detector slows to minutes while watching no goroutine that
// cheaper tests do not (issue 37). go test, and -race without -short, run
// it.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if Enabled && testing.Short() {
		t.Skip("skipped under -race -short: " + why)
	}
}
