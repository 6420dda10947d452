//go:build unix

package benchcpu

import (
	"syscall"
	"time"
)

// Process returns the CPU time the process has used (getrusage(2)), or 0
// if it cannot be read.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
