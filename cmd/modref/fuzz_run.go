package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/fuzzcase"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/internal/candidate"
	"github.com/modref/modref/mod/modcase"
)

// The kinds of a case's outcome.
const (
	kindPass        = "pass"
	kindUnsupported = "unsupported"
	kindMismatch    = "mismatch"
	// kindBadOutput: the candidate said it wrote its file, and the file is
	// missing, unreadable or not what the case judges (check's exit 2).
	kindBadOutput = "bad output"
	kindCrashed   = string(candidate.Crashed)
	kindTimedOut  = string(candidate.TimedOut)
	kindGarbage   = string(candidate.Garbage)
	// kindUngenerable: the drawn configuration has no case (a draw whose
	// routing never clears a tie, one ref refuses, or one the case's
	// precision profile does not judge); it is drawn again.
	kindUngenerable = "ungenerable"
)

// maxRedraws is how many times a case index is drawn again when its
// configuration cannot be generated.
const maxRedraws = 20

// fuzzRun is one modref fuzz run.
type fuzzRun struct {
	o       fuzzOptions
	runner  candidate.Runner
	scratch string
	stderr  io.Writer
	status  func(string)
	// kept counts the candidate files kept from failing runs.
	kept int
}

// outcome is one case run and judged.
type outcome struct {
	kind, reason string
	c            *format.Case
	reply        candidate.Reply
	result       *judge.CaseResult
	cand         map[string]*format.Array
	// candFile is where the candidate's output of a failing case is kept.
	candFile string
	// widened says c carries its float32 tolerances (judgeFuzzCase).
	widened bool
}

// judgeCandidate judges a candidate's arrays on a case as modref check does: under
// the precision profile the case's manifest names (fuzz --precision, or
// "precision" in --config-base), near-tie flips re-judged at the
// candidate's own decisions (judge.JudgeFlips).
func judgeCandidate(c *format.Case, cand map[string]*format.Array) (*judge.CaseResult, error) {
	c, _, _, err := underProfile(c, format.Profile{})
	if err != nil {
		return nil, err
	}
	r, err := judge.Compare(c, cand, false)
	if err == nil && !r.Pass {
		r, err = judge.JudgeFlips(c, cand, r, false)
	}
	return r, err
}

// runCase generates configuration g's case, runs the candidate on it and
// judges its output (judgeFuzzCase; need as there).
func (r *fuzzRun) runCase(g *golden.GenConfig, need float64) outcome {
	if p, err := format.ParseProfile(g.Precision); err == nil {
		// A draw the case's profile does not judge (a block narrower than
		// format.MinCoarseD in bf16 or fp16) is drawn again.
		if err := p.Judges(g.Config); err != nil {
			return outcome{kind: kindUngenerable, reason: err.Error()}
		}
	}
	c, err := golden.GenerateUnmeasured(g, nil)
	if err != nil {
		return outcome{kind: kindUngenerable, reason: err.Error()}
	}
	caseDir, out := fuzzScratch(r.scratch)
	if err := writeScratchCase(c, caseDir, filepath.Dir(out)); err != nil {
		return outcome{kind: kindUngenerable, reason: err.Error()}
	}
	manifest, arrays := format.Paths(caseDir, g.Name)
	reply := r.runner.Run(candidate.Request{Manifest: manifest, Arrays: arrays, Out: out})
	o := outcome{c: c, reply: reply, reason: reply.Reason}
	switch reply.Status {
	case candidate.OK:
	case candidate.Unsupported:
		o.kind = kindUnsupported
		return o
	default:
		o.kind = string(reply.Status)
		return o
	}
	o.cand, err = format.ReadCandidate(out, c)
	if err == nil {
		o.result, o.widened, err = judgeFuzzCase(c, o.cand, need)
	}
	switch {
	case errors.Is(err, errNoFloat32Tolerances):
		return outcome{kind: kindUngenerable, reason: err.Error()}
	case err != nil:
		o.kind, o.reason = kindBadOutput, err.Error()
	case o.result.Pass:
		o.kind = kindPass
	default:
		o.kind = kindMismatch
		if w := furthest(o.result, 1); len(w) > 0 {
			o.reason = w[0].Name + ": " + worstText(diagnose.DeviationResult{Worst: w[0]})
		}
	}
	if o.kind != kindPass {
		scratchMu.Lock()
		r.kept++
		o.candFile = filepath.Join(r.scratch, fmt.Sprintf("kept-%d.npz", r.kept))
		if os.Rename(out, o.candFile) != nil {
			o.candFile = ""
		}
		scratchMu.Unlock()
	}
	return o
}

// errNoFloat32Tolerances marks a case whose float32 tolerances could not be
// computed: it is drawn again, as a case that cannot be generated.
var errNoFloat32Tolerances = errors.New("float32 tolerances")

// judgeFuzzCase judges a candidate's arrays on case c, generated without
// its float32 tolerances (golden.GenerateUnmeasured with no Tolerancer),
// as modref check judges the case with them (judgeCandidate), computing
// them only where they can change what the run reports. Under a precision
// profile (the manifest's precision) the profile's tolerances replace the
// manifest's, which are not read. Without one, the case is judged first
// under the manifest's constant tolerances; the float32 tolerances
// (modcase.Float32Tolerances, the family of emulated float32
// implementations: most of a case's cost) are set on c, and the case
// judged again under them, when it fails, or when an array's error is
// above need times its tolerance (need is the ratio of the closest pass
// the run has seen, which it reports; negative when none, +Inf when only
// the verdict matters, as while shrinking). Float32Tolerances only widens a
// constant's atol, and a wider tolerance, or a wider gate margin, never
// fails a candidate that passed, nor raises an array's ratio: the verdict
// and the run's closest pass are the same as judging under the float32
// tolerances every time. widened says whether c now carries them.
func judgeFuzzCase(c *format.Case, cand map[string]*format.Array, need float64) (res *judge.CaseResult, widened bool, err error) {
	if c.Manifest.Precision != "" {
		res, err = judgeCandidate(c, cand)
		return res, false, err
	}
	if res, err = judgeCandidate(c, cand); err != nil || res.Pass && closestRatio(res) <= need {
		return res, false, err
	}
	if err := modcase.Float32Tolerances(c); err != nil {
		return nil, false, fmt.Errorf("%w: %w", errNoFloat32Tolerances, err)
	}
	res, err = judgeCandidate(c, cand)
	return res, true, err
}

// writeScratchCase writes case c into caseDir, and empties outDir for the
// candidate's file: both in the run's own scratch directory, under
// scratchMu.
func writeScratchCase(c *format.Case, caseDir, outDir string) error {
	scratchMu.Lock()
	defer scratchMu.Unlock()
	for _, d := range []string{caseDir, outDir} {
		os.RemoveAll(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return c.WriteScratch(caseDir)
}

// loop runs the cases and returns the summary.
func (r *fuzzRun) loop() *fuzzSummary {
	o := r.o
	sum := &fuzzSummary{Seed: o.seed, Shard: fmt.Sprintf("%d/%d", o.shard, o.shards), MaxSeq: o.space.MaxSeq,
		Kinds: map[string]int{}, Skipped: map[string]int{}, Failures: []*fuzzFailure{}}
	r.status = fuzzStatus(r.stderr)
	sigs := map[string]bool{}
	start := time.Now()
	defer func() {
		sum.Seconds = time.Since(start).Seconds()
		if sum.Seconds > 0 {
			sum.CasesPerSecond = float64(sum.Cases) / sum.Seconds
		}
		sum.Configurations = len(sigs)
		sum.ServerStarts = candidate.Starts(r.runner)
		if r.status != nil {
			r.status("")
		}
	}()
	if r.status != nil {
		r.status(fmt.Sprintf("fuzz: the first case (%s)", o.exec))
	}
	for k := 0; ; k++ {
		// --time bounds the run, but the first case always runs: a run
		// that judged nothing tells nothing (docs/fuzzing.md).
		if o.cases > 0 && k >= o.cases || k > 0 && o.duration > 0 && time.Since(start) >= o.duration || k > (math.MaxInt-o.shard)/o.shards {
			return sum
		}
		idx := o.shard + k*o.shards
		var g *golden.GenConfig
		var oc outcome
		for attempt := range maxRedraws {
			var err error
			if g, err = fuzzcase.Draw(o.seed, idx, attempt, o.space); err != nil {
				sum.err = err
				return sum
			}
			need := -1.0
			if sum.ClosestPass != nil {
				need = sum.ClosestPass.Ratio
			}
			if oc = r.runCase(g, need); oc.kind != kindUngenerable {
				break
			}
			sum.Redrawn++
		}
		if oc.kind == kindUngenerable {
			continue
		}
		sum.Cases++
		if r.status != nil {
			r.status(fmt.Sprintf("fuzz: %d cases, %d skipped, %d failing, %.0f s", sum.Cases, sum.skipped(), len(sum.Failures), time.Since(start).Seconds()))
		}
		switch oc.kind {
		case kindUnsupported:
			sum.Skipped[oc.reason]++
			continue
		case kindPass:
			sum.Passed++
			sum.ClosestPass = closer(sum.ClosestPass, g.Name, oc.result)
		default:
			f := r.failure(idx, g, oc)
			sum.Failures = append(sum.Failures, f)
		}
		sum.Judged++
		sum.Kinds[g.Kind]++
		sigs[fuzzcase.Signature(g)] = true
		if len(sum.Failures) >= o.maxFailures {
			return sum
		}
	}
}

// failure shrinks a failing case, diagnoses the smallest and writes its
// reproducer.
func (r *fuzzRun) failure(idx int, g *golden.GenConfig, oc outcome) *fuzzFailure {
	f := &fuzzFailure{Case: g.Name, Index: idx, Kind: oc.kind, Original: fuzzcase.Size(g), ShrinkSteps: []string{}}
	if oc.kind != kindTimedOut && r.o.shrinkTries > 0 {
		if r.status != nil {
			r.status(fmt.Sprintf("fuzz: %s failed (%s); shrinking", g.Name, oc.kind))
		}
		sh := fuzzcase.Shrink(g, r.o.space.Base, r.o.shrinkTries, func(n *golden.GenConfig) bool {
			x := r.runCase(n, math.Inf(1))
			if x.kind != oc.kind {
				removeKept(x)
				return false
			}
			removeKept(oc)
			oc = x
			return true
		})
		g, f.ShrinkSteps, f.Tried = sh.Config, append(f.ShrinkSteps, sh.Steps...), sh.Tried
	}
	f.Shrunk, f.Reason, f.Stderr = fuzzcase.Size(g), oc.reason, oc.reply.Stderr
	if !oc.widened && oc.c != nil {
		// The reproducer's manifest carries the float32 tolerances, as a
		// case gen --config makes does, whether or not judging needed them.
		if err := modcase.Float32Tolerances(oc.c); err != nil {
			f.Reason += fmt.Sprintf(" (the reproducer's manifest keeps the constant tolerances: %s: %v)", errNoFloat32Tolerances, err)
		}
		oc.widened = true
	}
	var d *fuzzDiagnosis
	if oc.kind == kindMismatch {
		if r.status != nil {
			r.status(fmt.Sprintf("fuzz: %s shrunk to %s; diagnosing", g.Name, f.Shrunk))
		}
		d = diagnoseShrunk(oc)
		f.Named, f.Stage, f.Verdict = d.named, d.stage, d.verdict
	}
	dir, err := writeReproducer(r.o, g, oc, f, d)
	if err != nil {
		f.ReproducerError = err.Error()
	} else {
		f.Reproducer = dir
	}
	return f
}

// removeKept removes the candidate file kept for an outcome no longer
// needed (the scratch directory is the run's own).
func removeKept(o outcome) {
	if o.candFile != "" {
		os.Remove(o.candFile)
	}
}

// fuzzStatus returns a function that keeps one status line on stderr up to
// date ("" erases it), or nil when stderr is not a terminal.
func fuzzStatus(stderr io.Writer) func(string) {
	if progressLine(stderr, "") == nil {
		return nil
	}
	return func(msg string) {
		if msg == "" {
			fmt.Fprint(stderr, "\r\x1b[K")
			return
		}
		fmt.Fprintf(stderr, "\r\x1b[K%s", msg)
	}
}

// fuzzSummary is what a run prints: in text, and with --json as this
// object.
type fuzzSummary struct {
	Seed   uint64 `json:"seed"`
	Shard  string `json:"shard"`
	MaxSeq int    `json:"max_seq"`
	// Cases counts the cases run; Judged those judged (run and not
	// declined), Passed those that passed.
	Cases  int `json:"cases"`
	Judged int `json:"judged"`
	Passed int `json:"passed"`
	// Skipped counts the cases the candidate declined, by its reason.
	Skipped map[string]int `json:"skipped"`
	// Redrawn counts the draws whose configuration had no case and were
	// drawn again.
	Redrawn int `json:"redrawn"`
	// Configurations counts the distinct configurations judged: their
	// choices, sizes aside (fuzzcase.Signature); Kinds the cases judged
	// per kind.
	Configurations int            `json:"configurations"`
	Kinds          map[string]int `json:"kinds"`
	Failures       []*fuzzFailure `json:"failures"`
	Seconds        float64        `json:"seconds"`
	CasesPerSecond float64        `json:"cases_per_second"`
	// ServerStarts counts the server processes started (0 for one process
	// per case): one, and one more after each case that ended one.
	ServerStarts int `json:"server_starts"`
	// ClosestPass is, of the cases that passed, the array that came
	// closest to its tolerance: the margin the run measured (nil when
	// none passed).
	ClosestPass *closestArray `json:"closest_pass,omitempty"`
	err         error
}

// closestArray is the array of a passing case closest to its tolerance:
// its case, its name, and its worst element's error over the tolerance
// there (diagnose.Excess, at most 1).
type closestArray struct {
	Case  string  `json:"case"`
	Array string  `json:"array"`
	Ratio float64 `json:"ratio"`
}

// closer returns c, or case name's array of res closest to its
// tolerance when it is closer than c.
func closer(c *closestArray, name string, res *judge.CaseResult) *closestArray {
	for _, a := range res.Arrays {
		e := diagnose.Excess(a)
		if math.IsInf(e, 0) || math.IsNaN(e) {
			continue // a passing case has none; never printed as a margin
		}
		if c == nil || e > c.Ratio {
			c = &closestArray{Case: name, Array: a.Name, Ratio: e}
		}
	}
	return c
}

// closestRatio is the largest ratio of error to tolerance of a result's
// arrays that closer reads (0 when none).
func closestRatio(res *judge.CaseResult) float64 {
	worst := 0.0
	for _, a := range res.Arrays {
		if e := diagnose.Excess(a); !math.IsInf(e, 0) && !math.IsNaN(e) {
			worst = math.Max(worst, e)
		}
	}
	return worst
}

// skipped is the number of cases declined.
func (s *fuzzSummary) skipped() int {
	n := 0
	for _, v := range s.Skipped {
		n += v
	}
	return n
}

// skipReasons lists the reasons for declining, most frequent first.
func (s *fuzzSummary) skipReasons() []string {
	var out []string
	for k := range s.Skipped {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if s.Skipped[out[i]] != s.Skipped[out[j]] {
			return s.Skipped[out[i]] > s.Skipped[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// fuzzFailure is one failing case, shrunk.
type fuzzFailure struct {
	// Case is the case's name, fuzz-SEED-INDEX; Index its index in the
	// seed's sequence of cases.
	Case  string `json:"case"`
	Index int    `json:"index"`
	// Kind is mismatch, bad output, crashed, timed out or garbage; Reason
	// says more (for a mismatch, the array furthest outside its
	// tolerance), about the smallest case.
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	// Stderr is the tail of the candidate's stderr on the smallest case.
	Stderr string `json:"stderr"`
	// Original and Shrunk are the sizes (fuzzcase.Size) of the case drawn
	// and of the smallest that fails the same way; ShrinkSteps the
	// simplifications kept, Tried the configurations run while shrinking.
	Original    string   `json:"original"`
	Shrunk      string   `json:"shrunk"`
	ShrinkSteps []string `json:"shrink_steps"`
	Tried       int      `json:"tried"`
	// Named, Stage and Verdict are diagnose's on the smallest case (a
	// mismatch): the deviations the candidate matches, where it first
	// departs from the oracle, and its verdict line.
	Named   []string         `json:"named,omitempty"`
	Stage   *judge.Departure `json:"stage,omitempty"`
	Verdict string           `json:"verdict,omitempty"`
	// Reproducer is the directory written; ReproducerError why none was.
	Reproducer      string `json:"reproducer,omitempty"`
	ReproducerError string `json:"reproducer_error,omitempty"`
	// CandidateNotKept says why the candidate's output is not in the
	// reproducer: larger than any output of the case (candidateFileBound).
	CandidateNotKept string `json:"candidate_not_kept,omitempty"`
}
