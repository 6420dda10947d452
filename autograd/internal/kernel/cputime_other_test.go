//go:build !unix

package kernel

import "time"

// cpuTime is not measured here: the benchmarks then report wall-clock
// GFLOP/s only.
func cpuTime() time.Duration { return 0 }
