//go:build modref_crashtest

package atomicfile

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// In the modref_crashtest build, MODREF_CRASH_AT=STEP:N kills the process
// with SIGKILL when WriteFile or ReplaceDir reaches STEP for the N-th time
// (counting from 1), as a power cut or the out-of-memory killer would. The
// crash tests build modref with -tags modref_crashtest; no other build has
// this.
func init() {
	at := os.Getenv("MODREF_CRASH_AT")
	if at == "" {
		return
	}
	step, nText, ok := strings.Cut(at, ":")
	n, err := strconv.Atoi(nText)
	if !ok || err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "MODREF_CRASH_AT=%q, want STEP:N with N >= 1\n", at)
		os.Exit(2)
	}
	var mu sync.Mutex
	seen := 0
	crashPoint = func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if s != step {
			return
		}
		if seen++; seen == n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
