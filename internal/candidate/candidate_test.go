package candidate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modref/modref/internal/race"
)

// The time limits of these tests. short is for the candidate whose
// outcome is the limit: it hangs (sleeps 30 s or more), so the limit only
// sets how long the test waits. long is for every candidate that ends on
// its own, whose outcome must not depend on the machine's speed: under
// -race on a loaded 2-core machine a shell's start alone has taken longer
// than 1 s (issue 37). A run must end within quick, scaled under -race
// (race.Limit: 20 s) and still well below the 30 s a hanging candidate or
// a child left behind sleeps, so that waiting for either fails the test.
const (
	short = 700 * time.Millisecond
	long  = time.Minute
)

var quick = race.Limit(5 * time.Second)

// req returns a request whose paths are in a fresh directory, the
// manifest holding text.
func req(t *testing.T) Request {
	t.Helper()
	dir := t.TempDir()
	r := Request{Manifest: filepath.Join(dir, "c ase.json"), Arrays: filepath.Join(dir, "c'ase.npz"), Out: filepath.Join(dir, "out.npz")}
	if err := os.WriteFile(r.Manifest, []byte("the manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// gone reports whether process pid no longer runs (it does not exist, or
// is a zombie no one has reaped yet), waiting a moment.
func gone(pid int) bool {
	for range 50 {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if syscall.Kill(pid, 0) != nil || err == nil && strings.Contains(string(stat), ") Z ") {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func TestPerCase(t *testing.T) {
	for _, tc := range []struct {
		name, cmd string
		limit     time.Duration
		want      Status
		reason    string
		stderr    string
	}{
		{"writes", `cat {manifest} > {out}; echo note >&2`, long, OK, "", "note"},
		{"unsupported", `echo considering; echo "no swiglu here"; exit 3`, long, Unsupported, "no swiglu here", ""},
		{"crashes", `echo 'Traceback: boom' >&2; exit 1`, long, Crashed, "exit status 1", "Traceback: boom"},
		{"killed", `kill -SEGV $$`, long, Crashed, "killed by signal segmentation fault", ""},
		{"hangs", `sleep 30`, short, TimedOut, "no exit within", ""},
		// A child in a session of its own holding stdout and stderr is
		// killed, and does not make the candidate's exit a crash, nor
		// wait for the child.
		{"leaves a child", `setsid sleep 30 & cat {manifest} > {out}`, long, OK, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(t)
			start := time.Now()
			got := NewPerCase(tc.cmd, tc.limit).Run(r)
			if got.Status != tc.want || !strings.Contains(got.Reason, tc.reason) || !strings.Contains(got.Stderr, tc.stderr) {
				t.Fatalf("got %+v, want status %q, reason with %q, stderr with %q", got, tc.want, tc.reason, tc.stderr)
			}
			if d := time.Since(start); d > quick {
				t.Errorf("took %v with a time limit of %v, want at most %v", d, tc.limit, quick)
			}
			if tc.want == OK {
				if b, err := os.ReadFile(r.Out); err != nil || string(b) != "the manifest" {
					t.Errorf("out holds %q (%v), want the manifest: the placeholders were not the request's paths", b, err)
				}
			}
		})
	}
}

// TestPerCaseKillsTheGroup: a candidate that leaves a child behind holding
// its output, or hangs in a child, has its whole process group killed.
func TestPerCaseKillsTheGroup(t *testing.T) {
	r := req(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The limit must let the shell write the child's pid first: 2 s (8 s
	// under -race) for what takes milliseconds.
	got := NewPerCase(`sleep 30 & echo $! > `+quote(pidFile)+`; wait`, race.Limit(2*time.Second)).Run(r)
	if got.Status != TimedOut {
		t.Fatalf("got %+v, want timed out", got)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(raw)), &pid); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the candidate's child %d outlived the time limit", pid)
	}
}

// server is a line-protocol server in /bin/sh: it answers each request
// with reply, a printf format taking the request's id.
func serverCmd(first, reply string) string {
	return `printf '%s\n' ` + quote(first) + `; while read -r line; do id=$(printf '%s' "$line" | sed 's/^{"id":\([0-9]*\).*/\1/'); printf ` + quote(reply+`\n`) + ` "$id"; done`
}

const helloLine = `{"protocol":"modref-fuzz","version":1}`

func TestServer(t *testing.T) {
	for _, tc := range []struct {
		name, cmd    string
		limit, start time.Duration // per case, and to the first line
		want         Status
		reason       string
	}{
		{"ok", serverCmd(helloLine, `{"id":%s,"status":"ok","reason":""}`), long, long, OK, ""},
		{"unsupported", serverCmd(helloLine, `{"id":%s,"status":"unsupported","reason":"no MoDE"}`), long, long, Unsupported, "no MoDE"},
		{"error", serverCmd(helloLine, `{"id":%s,"status":"error","reason":"ValueError: shapes"}`), long, long, Crashed, "ValueError: shapes"},
		{"wrong id", serverCmd(helloLine, `{"id":7%s,"status":"ok"}`), long, long, Garbage, "reply to request 1"},
		{"garbage", serverCmd(helloLine, `loading weights... %s`), long, long, Garbage, "loading weights"},
		{"no helloLine", serverCmd(`ready`, `{"id":%s,"status":"ok"}`), long, long, Garbage, "first line"},
		{"exits", `printf '%s\n' ` + quote(helloLine) + `; read -r line; echo dying >&2; exit 4`, long, long, Crashed, "exit status 4"},
		{"hangs", `printf '%s\n' ` + quote(helloLine) + `; sleep 30`, short, long, TimedOut, "no reply within"},
		{"never starts", `sleep 30`, long, short, TimedOut, "no first line"},
		// Alive after a line too long, or its stdout closed, reading
		// nothing: killed at once, or at the limit, and not said to have
		// ended.
		{"long line", `printf '%s\n' ` + quote(helloLine) + `; head -c 2000000 /dev/zero | tr '\0' a; exec sleep 30`, long, long, Garbage, "a line longer than 1048576 bytes without replying"},
		{"closes stdout", `printf '%s\n' ` + quote(helloLine) + `; exec >&-; exec sleep 30`, short, long, Crashed, "closed its stdout without replying and was still running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewServer(tc.cmd, tc.limit, tc.start)
			defer s.Close()
			start := time.Now()
			got := s.Run(req(t))
			if got.Status != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("got %+v, want status %q, reason with %q", got, tc.want, tc.reason)
			}
			if d := time.Since(start); d > quick {
				t.Errorf("took %v with time limits of %v and %v (to the first line), want at most %v", d, tc.limit, tc.start, quick)
			}
			if tc.name == "exits" && !strings.Contains(got.Stderr, "dying") {
				t.Errorf("stderr %q, want its tail", got.Stderr)
			}
		})
	}
}

// TestServerLivesOn: one process answers every case; after a case that
// ends it (garbage), the next case starts a new one.
func TestServerLivesOn(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "flag")
	// Answers ok, except once: garbage to the third request.
	cmd := `printf '%s\n' ` + quote(helloLine) + `; while read -r line; do id=$(printf '%s' "$line" | sed 's/^{"id":\([0-9]*\).*/\1/'); if [ "$id" = 3 ] && [ ! -e ` + quote(flag) + ` ]; then touch ` + quote(flag) + `; echo oops; else printf '{"id":%s,"status":"ok","reason":""}\n' "$id"; fi; done`
	s := NewServer(cmd, long, long)
	defer s.Close()
	var got []Status
	for range 5 {
		got = append(got, s.Run(req(t)).Status)
	}
	want := []Status{OK, OK, Garbage, OK, OK}
	if strings.Join(statuses(got), ",") != strings.Join(statuses(want), ",") {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if n := Starts(s); n != 2 {
		t.Errorf("%d server processes started, want 2 (one, and one after the garbage)", n)
	}
}

func statuses(s []Status) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

func TestServerCommand(t *testing.T) {
	// The reproducer's command runs the server on the one request.
	r := req(t)
	cmd := ServerCommand(`read -r first; printf '%s\n' "$first" > `+quote(r.Out), r)
	got := NewPerCase(cmd+` #{out}`, long).Run(r)
	b, err := os.ReadFile(r.Out)
	if got.Status != OK || err != nil || !strings.Contains(string(b), `"manifest":"`+r.Manifest+`"`) {
		t.Fatalf("%+v; the server read %q (%v), want the request naming %s", got, b, err, r.Manifest)
	}
}

// TestServerRepliesUnread: a server that replies without reading a request
// too long for the pipe is killed at the time limit, not waited for.
func TestServerRepliesUnread(t *testing.T) {
	s := NewServer(`printf '%s\n' `+quote(helloLine)+`; printf '{"id":1,"status":"ok","reason":""}\n'; exec sleep 30`, short, long)
	defer s.Close()
	r := req(t)
	r.Manifest += strings.Repeat("m", 200<<10)
	start := time.Now()
	got := s.Run(r)
	if got.Status != TimedOut || !strings.Contains(got.Reason, "the request was not read") {
		t.Fatalf("got %+v, want timed out, the request not read", got)
	}
	if d := time.Since(start); d > quick {
		t.Errorf("took %v with a time limit of %v, want at most %v", d, short, quick)
	}
}
