// Package benchcpu reads the CPU time of the process, as the operating
// system counts it (user and system time, every thread), for benchmarks
// and measurements that compare by what they used rather than by wall
// time: on a shared machine the wall time includes waiting for a core
// another process holds, the CPU time does not (docs/performance.md,
// bench/paired.py).
package benchcpu

import "testing"

// Start begins measuring a benchmark's loop; the function it returns,
// called after the loop, reports the process's CPU time since Start divided
// by b.N as the metric cpu-ns/op (nothing where Process cannot read it).
// Call Start after the set-up the loop should not count.
func Start(b *testing.B) (stop func()) {
	start := Process()
	return func() {
		if start != 0 {
			b.ReportMetric(float64(Process()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
