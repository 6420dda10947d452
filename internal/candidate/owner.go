package candidate

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// EnvMark is the environment variable every candidate process gets: the
// mark of the runner that started it, "PID.START.N" (modref's process id,
// its start time as the system counts it, and the runner's number), which
// its descendants inherit. sweep finds by it the processes a candidate
// left behind in another process group or session, and ReapOrphans those
// of a modref that is gone.
const EnvMark = "MODREF_FUZZ_CANDIDATE_OF"

// runners numbers the runners of this process, for their marks.
var runners atomic.Int64

// newMark returns a runner's mark: Owner() and the runner's number.
func newMark() string { return fmt.Sprintf("%s.%d", Owner(), runners.Add(1)) }

// Owner identifies this process as long as it runs and never after, where
// the system says when a process started (Linux: "PID.START", START from
// /proc/PID/stat); elsewhere it is "PID." and tells a process id reused
// from the process that had it before apart only by liveness.
func Owner() string { return ownerOf(os.Getpid()) }

// Alive reports whether the process that Owner returned owner in (or a
// runner mark of it) still runs. An owner it cannot read runs, so that a
// caller removes nothing of a process that may live.
func Alive(owner string) bool {
	f := strings.SplitN(owner, ".", 3)
	pid, err := strconv.Atoi(f[0])
	if err != nil || len(f) < 2 || pid <= 0 {
		return true
	}
	return ownerOf(pid) == f[0]+"."+f[1]
}
