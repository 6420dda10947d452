//go:build windows

package benchcpu

import (
	"syscall"
	"time"
)

// Process returns the CPU time the process has used (GetProcessTimes), or
// 0 if it cannot be read.
func Process() time.Duration {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0
	}
	var creation, exit, kernel, user syscall.Filetime
	if syscall.GetProcessTimes(h, &creation, &exit, &kernel, &user) != nil {
		return 0
	}
	// A Filetime counts 100-nanosecond intervals.
	ticks := func(f syscall.Filetime) time.Duration {
		return time.Duration(int64(f.HighDateTime)<<32|int64(f.LowDateTime)) * 100
	}
	return ticks(user) + ticks(kernel)
}
