package candidate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// Protocol and Version name the line protocol (docs/golden-format.md,
// "Running a candidate"): a server's first line is
// {"protocol": "modref-fuzz", "version": 1}.
const (
	Protocol = "modref-fuzz"
	Version  = 1
)

// maxLine bounds one line a server writes: a reply is a few hundred bytes,
// so a longer line is garbage, read no further.
const maxLine = 1 << 20

// hello is a server's first line.
type hello struct {
	Protocol string `json:"protocol"`
	Version  int    `json:"version"`
}

// request is one line modref writes to a server.
type request struct {
	ID       int    `json:"id"`
	Manifest string `json:"manifest"`
	Arrays   string `json:"arrays"`
	Out      string `json:"out"`
}

// reply is one line a server writes back.
type reply struct {
	ID     int    `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// line is one line read from a server, or why none could be.
type line struct {
	text []byte
	err  error
}

// server is a long-lived candidate process.
type server struct {
	cmd          string
	limit, start time.Duration
	mark         string

	proc   *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *output
	lines  chan line
	// exited is closed when proc has exited, werr then its Wait's error.
	exited chan struct{}
	werr   error
	errs   *tail
	id     int
	// starts counts the processes started: one, and one more after each
	// case that ended the previous one.
	starts int
}

// NewServer returns a Runner that starts cmd (a /bin/sh command line) once
// and sends it one request per case on its stdin, reading one reply per
// case from its stdout. The server has startLimit to write its first line
// and limit per case to reply; a server that overruns, exits, closes its
// stdout or writes anything but a reply is killed with its process group
// (and every process it left behind), the case reported as
// such, and a new server started for the next case.
func NewServer(cmd string, limit, startLimit time.Duration) Runner {
	return &server{cmd: cmd, limit: limit, start: startLimit, mark: newMark()}
}

// Starts reports how many server processes r has started (r a Runner
// NewServer returned; 0 for another Runner).
func Starts(r Runner) int {
	if s, ok := r.(*server); ok {
		return s.starts
	}
	return 0
}

// launch starts the server and reads its first line.
func (s *server) launch() *Reply {
	c := shell(s.cmd, s.mark)
	s.errs = &tail{}
	inR, inW, err := os.Pipe()
	if err != nil {
		return &Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return &Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
	}
	errs, err := newOutput()
	if err != nil {
		closeAll(&output{r: inR, w: inW}, &output{r: outR, w: outW})
		return &Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
	}
	c.Stdin, c.Stdout, c.Stderr = inR, outW, errs.w
	if err := c.Start(); err != nil {
		closeAll(&output{r: inR, w: inW}, &output{r: outR, w: outW}, errs)
		return &Reply{Status: Crashed, Reason: "cannot start: " + err.Error()}
	}
	inR.Close()
	outW.Close()
	started(s.mark, c)
	s.starts++
	s.proc, s.stdin, s.stdout, s.stderr = c, inW, outR, errs
	errs.copyTo(s.errs)
	s.exited = make(chan struct{})
	go func(exited chan struct{}) {
		s.werr = c.Wait()
		close(exited)
	}(s.exited)
	s.lines = make(chan line)
	go readLines(outR, s.lines)
	deadline := time.Now().Add(s.start)
	l, timedOut := s.next(deadline)
	switch {
	case timedOut:
		s.kill()
		return &Reply{Status: TimedOut, Reason: fmt.Sprintf("the server wrote no first line within %v; its process group was killed", s.start), Stderr: s.errs.take()}
	case l.err != nil:
		return s.died("the server", "before its first line", l.err, deadline)
	}
	var h hello
	if err := strictJSON(l.text, &h); err != nil || h.Protocol != Protocol || h.Version != Version {
		s.kill()
		return &Reply{Status: Garbage, Reason: fmt.Sprintf("the server's first line is %q, want {\"protocol\": %q, \"version\": %d}", clip(string(l.text), 200), Protocol, Version), Stderr: s.errs.take()}
	}
	return nil
}

// errLongLine marks a line longer than maxLine.
var errLongLine = fmt.Errorf("a line longer than %d bytes", maxLine)

// readLines sends each line of r to out (without its newline), then the
// error that ended it, and closes out. After a line too long it reads on
// to the end (or until r is closed), so that the writer is not blocked
// before it is killed.
func readLines(r io.Reader, out chan<- line) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		var buf []byte
		for {
			chunk, err := br.ReadSlice('\n')
			buf = append(buf, chunk...)
			if len(buf) > maxLine {
				out <- line{err: errLongLine}
				close(out)
				io.Copy(io.Discard, r)
				return
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if len(buf) > 0 {
					out <- line{text: buf}
				}
				out <- line{err: err}
				close(out)
				return
			}
			break
		}
		out <- line{text: bytes.TrimRight(buf, "\r\n")}
	}
}

// next waits until deadline for the server's next line.
func (s *server) next(deadline time.Time) (line, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case l, ok := <-s.lines:
		if !ok {
			return line{err: io.EOF}, false
		}
		return l, false
	case <-timer.C:
		return line{}, true
	}
}

// strictJSON decodes one JSON object with no unknown field.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more after the object")
	}
	return nil
}

// kill ends the server: its process group and what it left behind are
// killed first, then its pipes closed (which ends the reader, whoever
// else holds them), then it is waited for, which the kill bounds.
func (s *server) kill() {
	if s.proc == nil {
		return
	}
	killGroup(s.mark, s.proc)
	s.stdin.Close()
	s.stdout.Close()
	go func(ch <-chan line) { // the reader ends at the closed pipe
		for range ch {
		}
	}(s.lines)
	<-s.exited
	s.stderr.finish(drainDelay)
	s.proc = nil
}

// died reports a server whose stdout ended (err: io.EOF, or why it could
// not be read) before the line it owed, what (such as "before its first
// line"). A server that exits by deadline is reported with its exit
// status; one still running then (it closed its stdout, or wrote a line
// too long, and lives on) is killed and reported as such, never as ended.
func (s *server) died(who, what string, err error, deadline time.Time) *Reply {
	if errors.Is(err, errLongLine) {
		s.kill()
		return &Reply{Status: Garbage, Reason: fmt.Sprintf("%s wrote %s %s; its process group was killed", who, err, what), Stderr: s.errs.take()}
	}
	timer := time.NewTimer(max(0, time.Until(deadline)))
	defer timer.Stop()
	select {
	case <-s.exited:
		werr := s.werr
		s.kill()
		reason := who + " ended " + what + ": " + exitText(werr)
		if !errors.Is(err, io.EOF) {
			reason = who + " ended " + what + ": " + err.Error() + " (" + exitText(werr) + ")"
		}
		return &Reply{Status: Crashed, Reason: reason, Stderr: s.errs.take()}
	case <-timer.C:
		s.kill()
		return &Reply{Status: Crashed, Reason: fmt.Sprintf("%s closed its stdout %s and was still running at the time limit; its process group was killed", who, what), Stderr: s.errs.take()}
	}
}

func (s *server) Run(req Request) Reply {
	start := time.Now()
	if s.proc == nil {
		if r := s.launch(); r != nil {
			r.Elapsed = time.Since(start)
			return *r
		}
		s.errs.take() // what it wrote while starting is no case's
		start = time.Now()
	}
	deadline := start.Add(s.limit)
	s.id++
	raw, _ := json.Marshal(request{ID: s.id, Manifest: req.Manifest, Arrays: req.Arrays, Out: req.Out})
	wrote := make(chan error, 1)
	go func(w io.Writer) { _, err := w.Write(append(raw, '\n')); wrote <- err }(s.stdin)
	l, timedOut := s.next(deadline)
	r := Reply{Elapsed: time.Since(start)}
	timeout := func(what string) Reply {
		s.kill()
		<-wrote
		r.Status, r.Reason, r.Stderr = TimedOut, fmt.Sprintf("%s within %v; its process group was killed", what, s.limit), s.errs.take()
		return r
	}
	switch {
	case timedOut:
		return timeout("no reply")
	case l.err != nil:
		d := s.died("the server", "without replying", l.err, deadline)
		<-wrote
		d.Elapsed = time.Since(start)
		return *d
	}
	// A server that replies without reading its request: the write ends
	// by the deadline or the server is killed.
	timer := time.NewTimer(max(0, time.Until(deadline)))
	defer timer.Stop()
	select {
	case <-wrote:
	case <-timer.C:
		return timeout("a reply, but the request was not read")
	}
	var rep reply
	if err := strictJSON(l.text, &rep); err != nil || rep.ID != s.id || (rep.Status != "ok" && rep.Status != "unsupported" && rep.Status != "error") {
		s.kill()
		r.Status, r.Reason, r.Stderr = Garbage, fmt.Sprintf("the server's reply to request %d is %q, want {\"id\": %d, \"status\": \"ok\"|\"unsupported\"|\"error\", \"reason\": ...}", s.id, clip(string(l.text), 200), s.id), s.errs.take()
		return r
	}
	r.Stderr = s.errs.take()
	switch rep.Status {
	case "ok":
		r.Status = OK
	case "unsupported":
		r.Status, r.Reason = Unsupported, clip(rep.Reason, 500)
	default:
		r.Status, r.Reason = Crashed, "the server replied with an error: "+clip(rep.Reason, 2000)
	}
	return r
}

// closeDelay is how long Close lets a server end by itself after the end
// of its stdin.
const closeDelay = 2 * time.Second

// Close closes the server's stdin, which ends a well-behaved server, and
// kills its process group (and what it left behind) after a moment.
func (s *server) Close() error {
	defer live.Delete(s.mark)
	if s.proc == nil {
		return nil
	}
	s.stdin.Close()
	timer := time.NewTimer(closeDelay)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
	}
	s.kill()
	return nil
}
