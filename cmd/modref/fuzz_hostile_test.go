package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The hostile-candidate tests of modref fuzz (issue 37) run the built
// binary on candidates that hang it, leave processes behind or print
// escapes, and assert that every run ends within the limits it was given,
// says truthfully what happened, and leaves nothing running.

// hello is a server's first line, as /bin/sh prints it.
const hello = `printf '%s\n' '{"protocol": "modref-fuzz", "version": 1}'; `

// TestHostileFuzzServerHang: a server that writes a line over 1 MiB, or
// closes its stdout, and lives on without reading its stdin, is killed
// within --timeout or --start-timeout and reported as what it did, not
// as a server that ended with exit status 0.
func TestHostileFuzzServerHang(t *testing.T) {
	long := `head -c 2000000 /dev/zero | tr '\0' a; echo; `
	for _, tc := range []struct {
		name, exec, kind, want string
	}{
		{"long reply", hello + long + "exec sleep 1000", kindGarbage, "a line longer than 1048576 bytes without replying"},
		{"long first line", long + "exec sleep 1000", kindGarbage, "a line longer than 1048576 bytes before its first line"},
		{"stdout closed", hello + "exec >&-; exec sleep 1000", kindCrashed, "closed its stdout without replying and was still running"},
		{"stdout closed first", "exec >&-; exec sleep 1000", kindCrashed, "closed its stdout before its first line and was still running"},
		{"ended", hello + "exit 0", kindCrashed, "ended without replying: exit status 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, s, stderr := fuzzJSON(t, "--exec", tc.exec, "--cases", "1", "--timeout", "2s", "--start-timeout", "2s", "--shrink-tries", "0", "--out", t.TempDir())
			if d := time.Since(start); d > 12*time.Second {
				t.Errorf("took %v with limits of 2 s", d)
			}
			if code != 2 || len(s.Failures) != 1 || s.Failures[0].Kind != tc.kind || !strings.Contains(s.Failures[0].Reason, tc.want) {
				t.Fatalf("exit %d, failures %+v, want exit 2 and one %s failure with %q\n%s", code, s.Failures, tc.kind, tc.want, stderr)
			}
		})
	}
}

// pids reads the process ids a candidate appended to file.
func pids(t *testing.T, file string) []int {
	t.Helper()
	raw, _ := os.ReadFile(file)
	var out []int
	for _, f := range strings.Fields(string(raw)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// running reports whether process pid runs, waiting up to 2 s for it to
// end (a zombie no one reaped has ended).
func running(pid int) bool {
	for range 100 {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// expectGone fails t for every process of file still running, and kills
// it.
func expectGone(t *testing.T, file, what string) {
	t.Helper()
	ps := pids(t, file)
	if len(ps) == 0 {
		t.Errorf("%s: no process recorded in %s", what, file)
	}
	for _, pid := range ps {
		if running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s: process %d outlived the run", what, pid)
		}
	}
}

// TestHostileFuzzLeftBehind: a candidate's child in a session of its own,
// holding the candidate's stdout and stderr, is killed when its case ends
// (one process per case) or with the server, and does not turn a correct
// candidate into a crash.
func TestHostileFuzzLeftBehind(t *testing.T) {
	for _, perCase := range []bool{true, false} {
		dir := t.TempDir()
		log := filepath.Join(dir, "pids")
		exec := "setsid sleep 1000 & echo $! >> " + log + "; " + fakeExec("perfect", perCase)
		code, s, stderr := fuzzJSON(t, "--exec", exec, "--cases", "2", "--max-seq", "8", "--out", dir)
		if code != 0 || s.Passed != 2 {
			t.Errorf("per case %v: exit %d, %+v, want 2 cases passed\n%s", perCase, code, s, stderr)
		}
		expectGone(t, log, fmt.Sprintf("per case %v", perCase))
	}
}

// TestHostileFuzzKilled: modref fuzz killed by SIGKILL takes the
// candidate's first process with it (PR_SET_PDEATHSIG); the next run kills
// what that candidate left and removes the killed run's scratch directory,
// and nothing else: not a directory named like one that is not a run's,
// nor the scratch directory of a run still running.
func TestHostileFuzzKilled(t *testing.T) {
	tmp := t.TempDir()
	log := filepath.Join(tmp, "pids")
	cmd := exec.Command(modrefBin, "fuzz", "--exec", "echo $$ >> "+log+"; sleep 1000 & echo $! >> "+log+"; wait; : {out}", "--cases", "1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(pids(t, log)) < 2; i++ {
		if i == 500 {
			cmd.Process.Kill()
			t.Fatal("the candidate did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Not the killed run's: a directory named like a scratch directory,
	// and the scratch directory of a run that is running (this test's).
	foreign := filepath.Join(tmp, "modref-fuzz-mine")
	os.Mkdir(foreign, 0o700)
	writeFile(t, foreign, "owner", []byte("mine\n"))
	alive := filepath.Join(tmp, "modref-fuzz-alive")
	os.Mkdir(alive, 0o700)
	writeFile(t, alive, "owner", []byte(ownerOfSelf(t)+"\n"))
	cmd.Process.Kill()
	cmd.Wait()
	ps := pids(t, log)
	if running(ps[0]) {
		t.Errorf("the candidate's first process %d outlived modref's SIGKILL", ps[0])
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "modref-fuzz-*"))
	if len(left) != 3 {
		t.Fatalf("after the kill: %v, want the killed run's scratch directory and the two made here", left)
	}
	again := exec.Command(modrefBin, "fuzz", "--exec", fakeExec("perfect", true), "--cases", "1", "--max-seq", "4")
	again.Env = cmd.Env
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	expectGone(t, log, "after the next run")
	left, _ = filepath.Glob(filepath.Join(tmp, "modref-fuzz-*"))
	if strings.Join(left, " ") != alive+" "+foreign {
		t.Errorf("after the next run: %v, want only %s and %s", left, alive, foreign)
	}
}

// ownerOfSelf is this process's identity as modref fuzz writes it into
// its scratch directory ("PID.START").
func ownerOfSelf(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc: the identity of a run is its process id alone here")
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	return fmt.Sprintf("%d.%s", os.Getpid(), f[19])
}

// TestHostileFuzzSmall: the candidate's stderr and reasons are printed
// with terminal escapes escaped; a 900 MiB sparse output is not copied
// into the reproducer; bad flags are one message and exit 2; --time too
// short still runs a case.
func TestHostileFuzzSmall(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runBin(t, "fuzz", "--exec", `printf '\033]0;pwned\007\033[2J boom\n' >&2; exit 1; : {out}`, "--cases", "1", "--shrink-tries", "0", "--out", dir)
	if code != 2 || strings.ContainsAny(stdout, "\x1b\x07") || !strings.Contains(stdout, `\x1b]0;pwned\x07\x1b[2J boom`) {
		t.Errorf("a crash printing escapes: exit %d, stdout %q, want exit 2 and the escapes escaped\n%s", code, stdout, stderr)
	}
	start := time.Now()
	code, s, stderr := fuzzJSON(t, "--exec", `truncate -s 900M {out}`, "--cases", "1", "--shrink-tries", "0", "--out", dir)
	if code != 2 || len(s.Failures) != 1 || s.Failures[0].Kind != kindBadOutput || !strings.Contains(s.Failures[0].CandidateNotKept, "too large") {
		t.Fatalf("a 900 MiB sparse output: exit %d, %+v\n%s", code, s.Failures, stderr)
	}
	f := s.Failures[0]
	if _, err := os.Lstat(filepath.Join(f.Reproducer, "candidate", f.Case+".npz")); err == nil {
		t.Errorf("the 900 MiB output was copied into the reproducer")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--precision", ""}, "--precision is empty"},
		{[]string{"--precision="}, "--precision is empty"},
		{[]string{"--shard", "0/9223372036854775807"}, "at most 1048576 shards"},
	} {
		code, _, stderr := runBin(t, append([]string{"fuzz", "--exec", "true"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("modref fuzz %q: exit %d, stderr %q, want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
	code, s, stderr = fuzzJSON(t, "--exec", fakeExec("perfect", false), "--time", "1ns", "--max-seq", "4")
	if code != 0 || s.Cases != 1 || s.Passed != 1 {
		t.Errorf("--time 1ns: exit %d, %+v, want one case run and passed\n%s", code, s, stderr)
	}
}
