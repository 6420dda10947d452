package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/fuzzcase"
	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/candidate"
	"github.com/modref/modref/internal/readfile"
)

// fuzzOptions are modref fuzz's flags, as the run reads them.
type fuzzOptions struct {
	exec              string
	seed              uint64
	cases             int
	duration          time.Duration
	shard, shards     int
	space             fuzzcase.Space
	limit, startLimit time.Duration
	out               string
	maxFailures       int
	shrinkTries       int
	asJSON            bool
	args              []string // the command line, for the reproducer
	baseFile          string
}

// runFuzz implements `modref fuzz`.
func runFuzz(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fuzz", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref fuzz --exec CMD [flags]

Fuzzes an outside implementation: draws case configurations from a seed
over everything docs/spec.md has (layer, model, decode and MoDE cases;
every router, capacity rule, weighting, compute, auxiliary objective,
causal routing, layer pattern, window and padding), sizes from tiny to
--max-seq, generates each case as modref gen --config does, runs CMD on
it and judges its output as modref check does. A failing case is shrunk
(fewer layers, shorter sequences, fewer rows, smaller widths, simpler
choices) while it still fails, diagnosed, and written with the
candidate's output as a reproducer directory under --out that
modref check --corpus DIR --candidate DIR/candidate replays.

CMD is run with /bin/sh. If it names {out} it is run once per case, with
{manifest}, {arrays} and {out} replaced by the case's manifest, its
arrays (the inputs and parameters: never the expected arrays, which modref
keeps to judge with) and the candidate file to write (exit 0: written; exit 3:
unsupported configuration, the last line on stdout saying why). Otherwise
it is a server: started once, it speaks the line protocol of
docs/golden-format.md ("Running a candidate") on its stdin and stdout. A
candidate that hangs, crashes or writes garbage is reported as such, with
the tail of its stderr (control characters escaped); its process group
is killed, with what it left behind (docs/fuzzing.md, "Processes and
files").

Runs are deterministic: the same --seed, --shard and --max-seq draw the same
cases; --shard i/n runs the cases i, i+n, i+2n, ... of the seed, so n
machines split the work with no overlap.

Exit status: 0 no failure, 1 a case failed (its output does not match),
2 a candidate crashed, hung or wrote bad output, or bad usage.

flags:
`)
		fs.PrintDefaults()
	}
	var o fuzzOptions
	fs.StringVar(&o.exec, "exec", "", "the candidate's command `CMD` (a /bin/sh command line)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed `N` of the draws")
	fs.IntVar(&o.cases, "cases", 0, "run `N` cases (default 100 without --time)")
	fs.DurationVar(&o.duration, "time", 0, "run for `D` (such as 2m; the first case always runs), or until --cases when both are given")
	shard := fs.String("shard", "0/1", "run shard `i/n` of the cases: i, i+n, i+2n, ...")
	fs.IntVar(&o.space.MaxSeq, "max-seq", 64, "the longest sequence `S` drawn")
	fs.StringVar(&o.baseFile, "config-base", "", "pin part of the configuration: a JSON `FILE` in gen --config's vocabulary; only what it leaves out is drawn")
	fs.DurationVar(&o.limit, "timeout", time.Minute, "per-case time limit `D`")
	fs.DurationVar(&o.startLimit, "start-timeout", 2*time.Minute, "time limit `D` for a server to start (write its first line)")
	fs.StringVar(&o.out, "out", "modref-fuzz", "write reproducers under `DIR` (created when a case fails)")
	fs.IntVar(&o.maxFailures, "max-failures", 1, "stop after `N` failing cases")
	fs.IntVar(&o.shrinkTries, "shrink-tries", 300, "run at most `N` configurations while shrinking a failure")
	fs.BoolVar(&o.asJSON, "json", false, "print the summary as JSON")
	precision := fs.String("precision", "", "judge every case under the precision profile `P` ("+strings.Join(format.ProfileNames(), ", ")+
		"; docs/tolerances.md): written into each case's manifest, so that its reproducer is judged the same way; default: the manifests' float32 tolerances")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.args = args
	if err := refuseEmpty(fs, "exec"); err != nil {
		return err
	}
	if err := refuseEmpty(fs, "out"); err != nil {
		return err
	}
	if err := refuseEmpty(fs, "config-base"); err != nil {
		return err
	}
	if isSet(fs, "precision") && *precision == "" {
		fmt.Fprintf(stderr, "modref fuzz: --precision is empty; give one of %s, or leave the flag out\n", strings.Join(format.ProfileNames(), ", "))
		return errUsage
	}
	if o.exec == "" {
		fmt.Fprintln(stderr, "modref fuzz: --exec CMD is required: the command that runs your implementation")
		return errUsage
	}
	var err error
	if o.shard, o.shards, err = parseShard(*shard); err != nil {
		fmt.Fprintf(stderr, "modref fuzz: --shard %s: %v\n", *shard, err)
		return errUsage
	}
	switch {
	case o.space.MaxSeq < 1:
		fmt.Fprintf(stderr, "modref fuzz: --max-seq %d: want at least 1\n", o.space.MaxSeq)
		return errUsage
	case o.cases < 0 || o.duration < 0 || o.maxFailures < 1 || o.shrinkTries < 0 || o.limit <= 0 || o.startLimit <= 0:
		fmt.Fprintln(stderr, "modref fuzz: --cases, --time and --shrink-tries want values >= 0, --max-failures, --timeout and --start-timeout values > 0")
		return errUsage
	case o.cases == 0 && o.duration == 0:
		o.cases = 100
	}
	// Checked before anything runs, so that a failure found is not lost
	// for want of a place to write it.
	if fi, err := os.Stat(o.out); err == nil && !fi.IsDir() {
		return fmt.Errorf("--out %s: not a directory", o.out)
	}
	if o.baseFile != "" {
		raw, err := readfile.Read(o.baseFile, golden.MaxGenConfigBytes)
		if err != nil {
			return fmt.Errorf("--config-base: %w", err)
		}
		if o.space.Base, err = fuzzcase.DecodeObject(raw); err != nil {
			return fmt.Errorf("--config-base %s: not a JSON object: %w", o.baseFile, err)
		}
		if _, err := fuzzcase.Draw(o.seed, o.shard, 0, o.space); err != nil {
			return fmt.Errorf("--config-base %s: %w", o.baseFile, err)
		}
	}
	if *precision != "" {
		if _, err := format.ParseProfile(*precision); err != nil {
			fmt.Fprintf(stderr, "modref fuzz: --precision: %v\n", err)
			return errUsage
		}
		if pinned, ok := o.space.Base["precision"]; ok && pinned != *precision {
			fmt.Fprintf(stderr, "modref fuzz: --precision %s, but --config-base %s pins precision %v\n", *precision, o.baseFile, pinned)
			return errUsage
		}
		if o.space.Base == nil {
			o.space.Base = map[string]any{}
		}
		o.space.Base["precision"] = *precision
	}
	return fuzz(o, stdout, stderr)
}

// maxShards bounds n of --shard i/n, so that a case index i + k·n stays
// far inside an int for any run (k < 2^40 cases).
const maxShards = 1 << 20

// parseShard reads --shard i/n.
func parseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, errors.New("want i/n with 0 <= i < n, such as 0/4")
	}
	if n > maxShards {
		return 0, 0, fmt.Errorf("n = %d: want at most %d shards", n, maxShards)
	}
	return i, n, nil
}

// isSet reports whether flag name was given.
func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// fuzz runs the cases and reports them.
func fuzz(o fuzzOptions, stdout, stderr io.Writer) error {
	scratch, err := newScratch()
	if err != nil {
		return err
	}
	atomicfile.OnSignal(func() {
		// Held for good: the run writes nothing more into scratch
		// before the process exits.
		scratchMu.Lock()
		candidate.KillAll()
		os.RemoveAll(scratch)
	})
	defer os.RemoveAll(scratch)
	var runner candidate.Runner
	if candidate.PerCase(o.exec) {
		runner = candidate.NewPerCase(o.exec, o.limit)
	} else {
		runner = candidate.NewServer(o.exec, o.limit, o.startLimit)
	}
	defer runner.Close()
	r := &fuzzRun{o: o, runner: runner, scratch: scratch, stderr: stderr}
	sum := r.loop()
	if err := printFuzzSummary(stdout, sum, o.asJSON); err != nil {
		return err
	}
	switch {
	case sum.err != nil:
		return sum.err
	case sum.Judged == 0 && sum.Cases > 0:
		return fmt.Errorf("no case was judged: the candidate declined all %d as unsupported (see docs/fuzzing.md, \"Pinning the space\")", sum.Cases)
	}
	worst := error(nil)
	for _, f := range sum.Failures {
		if f.Kind != kindMismatch {
			return errCandidateBroken
		}
		worst = errMismatch
	}
	return worst
}

// scratchMu is held while the run writes into its scratch directory, and
// taken for good by the signal handler before it removes the directory.
var scratchMu sync.Mutex

// errCandidateBroken marks a fuzz run whose candidate crashed, hung or
// wrote bad output (exit 2, as check's bad input); the summary said so.
var errCandidateBroken = fmt.Errorf("%w: the candidate crashed, hung or wrote bad output", errReported)

// errReported marks an error whose message the command already printed
// (exit 2 without another line).
var errReported = errors.New("reported")

// fuzzScratch returns the scratch paths of a case: its directory, and the
// candidate file.
func fuzzScratch(scratch string) (caseDir, out string) {
	return filepath.Join(scratch, "case"), filepath.Join(scratch, "out", "candidate.npz")
}

// scratchOwner is the file of a run's scratch directory that names the
// run's process (candidate.Owner), by which a later run tells a directory
// left by a run killed with SIGKILL, which no handler of its saw.
const scratchOwner = "owner"

// newScratch removes what runs killed before left behind (their
// candidates' processes, then their scratch directories), and makes the
// run's own scratch directory, under the system's temporary directory.
func newScratch() (string, error) {
	candidate.ReapOrphans()
	if old, err := filepath.Glob(filepath.Join(os.TempDir(), "modref-fuzz-*")); err == nil {
		for _, dir := range old {
			if staleScratch(dir) {
				os.RemoveAll(dir)
			}
		}
	}
	dir, err := os.MkdirTemp("", "modref-fuzz-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, scratchOwner), []byte(candidate.Owner()+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// staleScratch reports whether dir is a scratch directory a modref fuzz
// made (a directory, not a link, of this user's, mode 0700 as
// os.MkdirTemp makes it, holding a regular file scratchOwner that names a
// process) and whose run no longer runs. A directory it cannot tell for
// sure is not stale: nothing but a run's own scratch directory is ever
// removed.
func staleScratch(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return false
	}
	owner := filepath.Join(dir, scratchOwner)
	if fi, err := os.Lstat(owner); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	raw, err := readfile.Read(owner, 64)
	if err != nil || !scratchOwnerText.Match(raw) {
		return false
	}
	return !candidate.Alive(strings.TrimSpace(string(raw)))
}

// scratchOwnerText is what newScratch writes into scratchOwner.
var scratchOwnerText = regexp.MustCompile(`^[0-9]+\.[0-9]*\n$`)
