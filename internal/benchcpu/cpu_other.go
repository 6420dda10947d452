//go:build !unix && !windows

package benchcpu

import "time"

// Process returns 0: this operating system gives no CPU time of a process
// that the standard library can read.
func Process() time.Duration { return 0 }
