//go:build !linux

package candidate

import (
	"strconv"
	"syscall"
)

// sysProcAttr is the candidate's first process's: a process group of its
// own. Systems other than Linux have no PR_SET_PDEATHSIG: a candidate
// outlives a modref killed by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ownerOf returns "PID." while process pid runs (no start time is read
// here, so a reused id looks alive), "" when it does not.
func ownerOf(pid int) string {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return ""
	}
	return strconv.Itoa(pid) + "."
}

// sweep does nothing here: without /proc, the processes a candidate left
// outside its process group are not found.
func sweep(mark string) {}

// ReapOrphans does nothing here (see sweep).
func ReapOrphans() {}
