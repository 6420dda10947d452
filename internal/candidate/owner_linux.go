//go:build linux

package candidate

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr is the candidate's first process's: a process group of its
// own, and SIGKILL from the kernel when modref dies (PR_SET_PDEATHSIG),
// even by SIGKILL or the OOM killer. (The kernel sends it when the thread
// that started the process ends; Go ends no thread but one a goroutine
// locked and left, which modref does not do.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ownerOf returns process pid's identity "PID.START", START its start
// time in clock ticks since boot (/proc/PID/stat, field 22), or "" when
// it does not run.
func ownerOf(pid int) string {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name, field 2, is in parentheses and may hold anything;
	// the fields after its last ')' are numbers: state (3) first.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return strconv.Itoa(pid) + "." + f[19]
}

// maxEnviron bounds what is read of a process's environment (Linux caps
// a program's arguments and environment together at a quarter of its
// stack limit, 2 MiB by default).
const maxEnviron = 4 << 20

// processes calls f with the id and the EnvMark value of every process
// this user may read whose environment holds one, this process aside.
func processes(f func(pid int, mark string)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	key := []byte(EnvMark + "=")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		fh, err := os.Open("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		raw, _ := io.ReadAll(io.LimitReader(fh, maxEnviron))
		fh.Close()
		for _, kv := range bytes.Split(raw, []byte{0}) {
			if bytes.HasPrefix(kv, key) {
				f(pid, string(kv[len(key):]))
				break
			}
		}
	}
}

// sweepPasses bounds the passes of sweep: a process that forks as it is
// killed leaves a child the next pass finds.
const sweepPasses = 5

// sweep kills every process that carries mark in its environment: the
// descendants of a runner's candidate, those that left its process group
// (a new session, a daemon) included. A descendant that cleared its
// environment escapes it.
func sweep(mark string) {
	for range sweepPasses {
		found := false
		processes(func(pid int, m string) {
			if m == mark {
				syscall.Kill(pid, syscall.SIGKILL)
				found = true
			}
		})
		if !found {
			return
		}
	}
}

// ReapOrphans kills every process of this user that carries the mark of a
// modref no longer running: what a candidate left when modref was killed
// by SIGKILL (CI's timeout -s KILL, the OOM killer), which no handler of
// modref's saw. The first process of such a candidate died with modref
// (sysProcAttr); its descendants live until a later modref fuzz calls
// this.
func ReapOrphans() {
	for range sweepPasses {
		found := false
		processes(func(pid int, m string) {
			if !Alive(m) {
				syscall.Kill(pid, syscall.SIGKILL)
				found = true
			}
		})
		if !found {
			return
		}
	}
}
