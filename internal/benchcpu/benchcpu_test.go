package benchcpu

import (
	"testing"
	"time"
)

// TestProcessCountsWork checks that spinning for 50 ms of wall time adds
// more CPU time than sleeping for as long.
func TestProcessCountsWork(t *testing.T) {
	if Process() == 0 {
		t.Skip("this operating system gives no process CPU time")
	}
	t0 := Process()
	time.Sleep(50 * time.Millisecond)
	slept := Process() - t0
	t1 := Process()
	x := 1.0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x = x*1.0000001 + 1e-9
	}
	spun := Process() - t1
	if spun <= slept {
		t.Errorf("spinning used %v of CPU time, sleeping %v (x = %v); want more for spinning", spun, slept, x)
	}
}
