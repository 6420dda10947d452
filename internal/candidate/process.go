package candidate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UnsupportedExit is the exit status by which a one-process-per-case
// candidate declines a case's configuration; the last line it wrote to
// stdout is the reason.
const UnsupportedExit = 3

// drainDelay bounds how long the output a finished or killed candidate
// wrote is read after its process group is killed: a descendant that
// escaped the kill and holds the pipes open cannot make Run wait longer.
const drainDelay = 500 * time.Millisecond

// shell returns the command that runs cmd with /bin/sh in a process group
// of its own, which killGroup kills whole, with the runner's mark in its
// environment, by which sweep finds the descendants that left the group
// (see owner_linux.go).
func shell(cmd, mark string) *exec.Cmd {
	c := exec.Command("/bin/sh", "-c", cmd)
	c.SysProcAttr = sysProcAttr()
	env := []string{EnvMark + "=" + mark}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvMark+"=") {
			env = append(env, kv)
		}
	}
	c.Env = env
	return c
}

// live holds the marks of the runners whose processes may be running,
// for KillAll; each maps to the process group of its current process (0
// when none runs).
var live sync.Map

// started records c's process group as live under mark.
func started(mark string, c *exec.Cmd) { live.Store(mark, c.Process.Pid) }

// killGroup kills c's process group and every process that carries mark
// in its environment (the group's members that left it); an error (the
// group is gone) is of no interest.
func killGroup(mark string, c *exec.Cmd) {
	if c.Process != nil {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		live.Store(mark, 0)
	}
	sweep(mark)
}

// KillAll kills the process group of every candidate process running, and
// their descendants that left it: what a command interrupted by a signal
// calls before it exits, since a candidate's own process group does not
// get the terminal's signals.
func KillAll() {
	live.Range(func(k, v any) bool {
		if pid := v.(int); pid > 0 {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		sweep(k.(string))
		return true
	})
}

// exitText says how a process ended, from Wait's error.
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// output is a pipe a candidate writes into and modref reads until its end
// or until it gives up: modref's end is a file of its own, not one os/exec
// copies from, so that Wait returns when the process exits, whoever else
// holds the pipe.
type output struct {
	r, w *os.File
	done chan struct{}
}

// newOutput makes a pipe whose write end is for the process.
func newOutput() (*output, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &output{r: r, w: w, done: make(chan struct{})}, nil
}

// copyTo closes the write end (the process has its own copy) and copies
// the read end into dst until its end or until it is closed.
func (o *output) copyTo(dst io.Writer) {
	o.w.Close()
	go func() {
		io.Copy(dst, o.r)
		close(o.done)
	}()
}

// finish waits up to d for the end of the output, then closes modref's
// end, which ends the copy.
func (o *output) finish(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
	}
	o.r.Close()
	<-o.done
}

// closeAll closes both ends of outputs that were made but not used.
func closeAll(outs ...*output) {
	for _, o := range outs {
		if o != nil {
			o.r.Close()
			o.w.Close()
		}
	}
}

// perCase runs one process per case.
type perCase struct {
	cmd   string
	limit time.Duration
	mark  string
}

// NewPerCase returns a Runner that runs cmd (a /bin/sh command line with
// the Placeholders, shell-quoted paths put in their place) once per case,
// in a process group of its own killed when the case takes longer than
// limit, and, either way, when the case ends, with every process it left
// behind (docs/fuzzing.md, "Processes and files"). Exit status 0 is OK,
// UnsupportedExit an unsupported configuration, anything else a crash.
func NewPerCase(cmd string, limit time.Duration) Runner {
	return &perCase{cmd: cmd, limit: limit, mark: newMark()}
}

func (p *perCase) Run(req Request) Reply {
	c := shell(expand(p.cmd, req), p.mark)
	var stdout, stderr tail
	outs := [2]*output{}
	for i := range outs {
		o, err := newOutput()
		if err != nil {
			closeAll(outs[:]...)
			return Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
		}
		outs[i] = o
	}
	c.Stdout, c.Stderr = outs[0].w, outs[1].w
	start := time.Now()
	if err := c.Start(); err != nil {
		closeAll(outs[:]...)
		return Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
	}
	started(p.mark, c)
	outs[0].copyTo(&stdout)
	outs[1].copyTo(&stderr)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	timer := time.NewTimer(p.limit)
	defer timer.Stop()
	var err error
	timedOut := false
	select {
	case err = <-done:
	case <-timer.C:
		timedOut = true
	}
	killGroup(p.mark, c) // whatever it left behind
	if timedOut {
		<-done
	}
	for _, o := range outs {
		o.finish(drainDelay)
	}
	if timedOut {
		return Reply{Status: TimedOut, Reason: fmt.Sprintf("no exit within %v; its process group was killed", p.limit), Stderr: stderr.take(), Elapsed: time.Since(start)}
	}
	r := Reply{Status: OK, Stderr: stderr.take(), Elapsed: time.Since(start)}
	switch code := c.ProcessState.ExitCode(); {
	case err == nil:
	case code == UnsupportedExit:
		r.Status = Unsupported
		lines := strings.Split(strings.TrimSpace(stdout.take()), "\n")
		r.Reason = clip(lines[len(lines)-1], 500)
	default:
		r.Status, r.Reason = Crashed, exitText(err)
	}
	return r
}

func (p *perCase) Close() error {
	live.Delete(p.mark)
	return nil
}
