package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/mod/modcase"
)

// errMismatch marks a check that ran and found a candidate wrong (exit 1).
var errMismatch = errors.New("mismatch")

// runCheck implements `modref check`.
func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref check [flags] [CASE...]

Compares a candidate's arrays with the golden corpus. With --candidate FILE.npz
it judges one case; with --candidate DIR it judges every named case (all cases
if none is named) against DIR/CASE.npz, a bad or missing file being that
case's error; with --present too, only the cases whose file DIR holds, the
others listed as left out (refused when DIR holds none). Without --candidate it checks modref's own float32
implementation (mod/) against the corpus; an empty --candidate "" is a usage
error. Candidates are read as untrusted input: regular files only, sizes
bounded by the case, every CRC-32 and data length verified
(docs/golden-format.md). The table (or JSON) is printed before the --junit
report, which is written atomically, only over a regular file (a device
such as /dev/null, a FIFO or a directory is refused before anything is
judged) and never over an input.

--precision P (float64, float32, tf32, bf16, fp16) judges each array by
that precision's tolerance: a multiple of an emulated implementation's
error on the case (docs/tolerances.md); a case whose manifest names a
precision is judged under it without the flag. A routing decision that
differs from the truth's only within the near-tie margin is judged at the
candidate's own decisions, and reported.

Exit status: 0 all pass, 1 a mismatch, 2 bad input (in any case) or usage.

flags:
`)
		fs.PrintDefaults()
	}
	corpus := corpusFlag(fs)
	candidate := fs.String("candidate", "", "candidate .npz file, or a directory of CASE.npz files")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	junit := fs.String("junit", "", "also write the results as a JUnit XML report to `FILE`")
	allowMissing := fs.Bool("allow-missing", false, "report arrays missing from a candidate instead of failing with exit 2")
	present := fs.Bool("present", false, "with --candidate DIR, judge only the cases that have a file in DIR; list the others as left out")
	profileOf := precisionFlag(fs)
	named, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	for _, name := range []string{"candidate", "junit", "precision"} {
		if err := refuseEmpty(fs, name); err != nil {
			return err
		}
	}
	profile, err := profileOf()
	if err != nil {
		return err
	}
	names := named
	if len(names) == 0 {
		all, err := corpus().List()
		if err != nil {
			return err
		}
		names = all
	}
	single := false
	if *candidate != "" {
		fi, err := os.Stat(*candidate)
		if err != nil {
			return fmt.Errorf("candidate %s: %w", *candidate, errors.Unwrap(err))
		}
		single = !fi.IsDir()
		if single && len(named) != 1 {
			return fmt.Errorf("--candidate %s is one file: name exactly one case to judge it against", *candidate)
		}
	}
	var leftOut []string
	if *present {
		if *candidate == "" || single {
			return fmt.Errorf("--present judges the cases whose file a --candidate DIR holds; give the directory")
		}
		if names, leftOut, err = presentCases(*candidate, names); err != nil {
			return err
		}
	}
	candPath := func(name string) string {
		switch {
		case *candidate == "":
			return selfName
		case single:
			return *candidate
		}
		return filepath.Join(*candidate, name+".npz")
	}
	if *junit != "" {
		inputs := []string{*candidate}
		for _, name := range names {
			m, a := corpus().Paths(name)
			inputs = append(inputs, m, a, candPath(name))
		}
		if err := refuseOverwrite(*junit, inputs); err != nil {
			return err
		}
	}
	var results []*judge.CaseResult
	var bad []error
	for _, name := range names {
		c, partial, err := loadForCheck(corpus(), name, *candidate != "", profile)
		if err != nil {
			return err
		}
		var cand map[string]*format.Array
		path := candPath(name)
		if *candidate == "" {
			cand, err = selfCandidate(c)
		} else {
			cand, err = format.ReadCandidate(path, c)
		}
		var r *judge.CaseResult
		var measured *judge.ProfileReport
		used := profile
		if err == nil {
			c, measured, used, err = underProfile(c, profile)
		}
		if err == nil {
			r, err = judge.Compare(c, cand, *allowMissing)
			if err == nil && !r.Pass {
				// Judging at the candidate's decisions recomputes the
				// case: it needs what LoadJudged left out (partial only
				// under the manifest's own tolerances, which Load gives
				// again).
				if partial {
					c, err = corpus().Load(name)
				}
				if err == nil {
					r, err = judge.JudgeFlips(c, cand, r, *allowMissing)
				}
			}
			if err != nil {
				err = fmt.Errorf("%s (case %s): %w", path, name, err)
			}
		}
		if err != nil {
			// A bad candidate file is its case's error; the other cases
			// are still judged.
			r = &judge.CaseResult{Case: name, Error: err.Error()}
			bad = append(bad, err)
		}
		r.Candidate = path
		r.Precision, r.Baseline = used.Name, measured
		results = append(results, r)
	}
	if !*asJSON {
		printProfile(stdout, profile)
	}
	if err := printReport(stdout, results, leftOut, *present, *asJSON, *candidate, profile); err != nil {
		return err
	}
	// The report comes after the table, so that a report path that cannot
	// be written does not hide the results.
	if *junit != "" {
		if err := writeJUnit(*junit, results, leftOut); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return errors.Join(bad...)
	}
	for _, r := range results {
		if !r.Pass {
			return errMismatch
		}
	}
	return nil
}

// loadForCheck loads case name for check: only what judge.Compare reads
// (Corpus.LoadJudged; partial) when a candidate's file is judged under the
// manifest's tolerances, and the whole case when modref's own
// implementation computes it (candidate false) or a precision profile's
// family emulates it (profile, or the manifest's precision).
func loadForCheck(corpus format.Corpus, name string, candidate bool, profile format.Profile) (c *format.Case, partial bool, err error) {
	if !candidate || !profile.IsZero() {
		c, err = corpus.Load(name)
		return c, false, err
	}
	if c, err = corpus.LoadJudged(name); err != nil || c.Manifest.Precision == "" {
		return c, true, err
	}
	c, err = corpus.Load(name)
	return c, false, err
}

// selfName is what the table and JSON call modref's own implementation.
const selfName = "modref's mod/ (float32 autograd)"

// presentCases splits names into the cases whose candidate file dir holds
// (anything named NAME.npz there, judged and refused if it is not a
// regular file) and those it does not; none present is an error.
func presentCases(dir string, names []string) (judged, leftOut []string, err error) {
	for _, name := range names {
		if _, err := os.Lstat(filepath.Join(dir, name+".npz")); errors.Is(err, fs.ErrNotExist) {
			leftOut = append(leftOut, name)
			continue
		}
		judged = append(judged, name)
	}
	if len(judged) == 0 {
		return nil, nil, fmt.Errorf("--present: %s holds no candidate file for any of the %d cases asked for (NAME.npz, such as %s.npz)", dir, len(names), names[0])
	}
	return judged, leftOut, nil
}

// presentReport is what check --present --json prints: the results of the
// cases judged, and the cases left out for want of a file.
type presentReport struct {
	Results []*judge.CaseResult `json:"results"`
	LeftOut []string            `json:"left_out"`
}

// printReport writes the results as JSON or as the table, and with
// --present the cases left out: in JSON, an object holding both.
func printReport(stdout io.Writer, results []*judge.CaseResult, leftOut []string, present, asJSON bool, candidate string, profile format.Profile) error {
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any = results
		if present {
			v = presentReport{Results: results, LeftOut: append([]string{}, leftOut...)}
		}
		return enc.Encode(v)
	}
	printResults(stdout, results, candidate, profile)
	if len(leftOut) > 0 {
		shown := leftOut[:min(len(leftOut), shownLeftOut)]
		more := ""
		if len(leftOut) > len(shown) {
			more = fmt.Sprintf(" and %d more (--json lists them all)", len(leftOut)-len(shown))
		}
		fmt.Fprintf(stdout, "left out, no file in %s: %d cases: %s%s\n", candidate, len(leftOut), strings.Join(shown, ", "), more)
	}
	return nil
}

// shownLeftOut is how many of the cases --present left out the table
// names.
const shownLeftOut = 12

// refuseEmpty makes a flag given an empty value a usage error: an unset
// variable in a script (--candidate "$CAND") must not quietly mean the
// flag's absence.
func refuseEmpty(fs *flagSet, name string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name && f.Value.String() == "" {
			fmt.Fprintf(fs.Output(), "modref %s: --%s is empty; give a path, or leave the flag out\n", fs.Name(), name)
			err = errUsage
		}
	})
	return err
}

// refuseOverwrite refuses an output path that atomicfile.WriteFile would
// not write (a device, FIFO or directory, or a missing directory), or that
// is one of the inputs (the same file, by path or through a link).
func refuseOverwrite(out string, inputs []string) error {
	if err := atomicfile.Check(out); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	fo, err := os.Stat(out)
	if err != nil {
		return nil // a new file
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if fi, err := os.Stat(in); err == nil && os.SameFile(fo, fi) {
			return fmt.Errorf("--junit %s is an input of this check (%s); refusing to overwrite it", out, in)
		}
	}
	return nil
}

// selfCandidate computes a case with modref's own implementation, the
// float32 autograd one in mod/.
func selfCandidate(c *format.Case) (map[string]*format.Array, error) {
	return modcase.Candidate(c)
}

// printResults writes the table a person reads: one line per case with its
// worst array by error over tolerance, or, for a failing case, one line per
// array that failed or is missing, worst first, with where and by how much;
// a routing mismatch's or a flip report's lines under their case.
//
// A case judged under a profile other than the flag's (its manifest's
// precision) has the profile after its name.
func printResults(w io.Writer, results []*judge.CaseResult, candidate string, profile format.Profile) {
	fmt.Fprintln(w, candidateHeader(results, candidate))
	var t table
	t.row("case\tarray\terror/tol\tmax abs\tmax rel\twhere\tgot\twant\tresult")
	passed, bad := 0, 0
	for _, r := range results {
		name := r.Case
		if r.Precision != profile.Name {
			name += " [" + r.Precision + "]"
		}
		if r.Error != "" {
			bad++
			t.row("%s\t(bad input)\t\t\t\t\t\t\tERROR: %s", name, r.Error)
			continue
		}
		ranked := byExcess(r)
		if r.Pass {
			passed++
			worst := ranked[0]
			t.row("%s\t(%d arrays, worst %s)\t%s\t%.2e\t%.2e\t%v\t\t\tpass", name, len(r.Arrays), worst.Name, excessText(worst), worst.MaxAbs, worst.MaxRel, worst.Where)
			t.notes(flipLines(r.Flips))
			continue
		}
		for _, a := range ranked {
			switch a.Status {
			case judge.StatusMissing:
				t.row("%s\t%s\t\t\t\t\t\t\tmissing", name, a.Name)
			case judge.StatusFail:
				t.row("%s\t%s\t%s\t%.2e\t%.2e\t%v\t%.8g\t%.8g\tFAIL (rtol %.0e, atol %.1e)",
					name, a.Name, excessText(a), a.MaxAbs, a.MaxRel, a.Where, a.Got, a.Want, a.Tolerance.RTol, a.Tolerance.ATol)
				for _, m := range a.Routing {
					if m.Order {
						t.notes([]string{fmt.Sprintf("    row %d: %s", m.Row, describeFlip(m))})
						continue
					}
					t.notes([]string{fmt.Sprintf("    row %d: routed only by the candidate %s, only by the oracle %s; %s",
						m.Row, judge.PositionList(m.OnlyCandidate), judge.PositionList(m.OnlyOracle), describeFlip(m))})
				}
			}
		}
		t.notes(flipLines(r.Flips))
	}
	t.write(w)
	if passed+bad < len(results) {
		if note := uncovered(profile); note != "" {
			fmt.Fprintln(w, note)
		}
	}
	if bad > 0 {
		fmt.Fprintf(w, "%d passed, %d failed, %d bad input\n", passed, len(results)-passed-bad, bad)
		return
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", passed, len(results)-passed)
}

// candidateHeader says what the table judges: modref's own
// implementation, a candidate file, or a directory's files, named by the
// paths read (the first two, and how many more).
func candidateHeader(results []*judge.CaseResult, candidate string) string {
	const verified = "(CRC-32, lengths and sizes of every array verified)"
	if candidate == "" {
		return fmt.Sprintf("implementation: %s, run on each case's inputs and parameters", selfName)
	}
	if fi, err := os.Stat(candidate); err != nil || !fi.IsDir() {
		return fmt.Sprintf("candidate: %s %s", candidate, verified)
	}
	var paths []string
	for _, r := range results {
		paths = append(paths, r.Candidate)
	}
	switch {
	case len(paths) == 1:
		return fmt.Sprintf("candidate: %s %s", paths[0], verified)
	case len(paths) == 2:
		return fmt.Sprintf("candidates: %s and %s, one per case %s", paths[0], paths[1], verified)
	}
	return fmt.Sprintf("candidates: %s, %s and %d more in %s, one per case %s", paths[0], paths[1], len(paths)-2, filepath.Clean(candidate), verified)
}

// flipLines is a flip report (judge.JudgeFlips) as lines under its case:
// how many decisions flipped, where, by how much, and what was done. Flips
// beyond the margin are not repeated: the routing lines say why.
func flipLines(f *judge.FlipReport) []string {
	if f == nil || f.Verdict == judge.FlipsBeyond {
		return nil
	}
	var out []string
	switch f.Verdict {
	case judge.FlipsRejudged:
		out = append(out, fmt.Sprintf("    %d routing decisions flipped, each within the near-tie margin %.3g of the truth's boundary (%d of the truth's decisions lie within it, at most %d may flip): judged against the truth recomputed with the candidate's decisions",
			f.Count, f.Margin, f.NearTies, f.Limit))
	case judge.FlipsTooMany:
		out = append(out, fmt.Sprintf("    %d routing decisions flipped within the near-tie margin %.3g, more than the %d that %d decisions within it explain: too many flips (docs/tolerances.md)",
			f.Count, f.Margin, f.Limit, f.NearTies))
	default:
		out = append(out, fmt.Sprintf("    %d routing decisions flipped, not rejudged: %s (near-tie margin %.3g)", f.Count, f.Verdict, f.Margin))
	}
	if f.GateMargin > 0 {
		out = append(out, fmt.Sprintf("    an expert's choice is held to the near-tie margin %.3g in gates (twice the gates' tolerance)", f.GateMargin))
	}
	for _, x := range f.Flips {
		layer := ""
		if x.Layer >= 0 {
			layer = fmt.Sprintf("layer %d ", x.Layer)
		}
		if x.Expert != nil {
			layer = fmt.Sprintf("expert %d ", *x.Expert)
		}
		within := "within the margin"
		switch {
		case !x.Within:
			within = "NOT within the margin"
		case x.RoundOffTie:
			within = "within the margin, an exact tie of the truth's router weights among them, which the candidate's own router weights order its way (its round-off broke the tie)"
		}
		out = append(out, fmt.Sprintf("    %srow %d: routed only by the candidate %s, only by the truth %s; furthest %.3g from the boundary, %s",
			layer, x.Row, judge.PositionList(x.OnlyCandidate), judge.PositionList(x.OnlyOracle), x.Distance, within))
	}
	return out
}

// describeFlip says what kind of routing difference a row has: a broken tie
// rule, a different number of tokens, or a flip and how far it is from a
// tie.
func describeFlip(m judge.RowMismatch) string {
	if m.Order {
		return "same positions, wrong order: selected lists a row's positions in ascending order (docs/spec.md §4); a block run in the candidate's order has its causal mask follow it (unsorted_indices)"
	}
	if m.Tie {
		if m.Causal {
			return "a score of exactly 0: the rule decides (routed only when > 0, docs/spec.md §9), and the candidate broke it"
		}
		return "router weights exactly tied (gap 0): the tie rule decides (the lower position wins, docs/spec.md §4), and the candidate broke it (its own router weights do not put the token it routed just above the tied one it left out, as a round-off that broke the tie would: docs/tolerances.md, \"Exact ties broken by round-off\")"
	}
	var what string
	switch {
	case m.RoutesAll:
		what = fmt.Sprintf("the candidate routes all %d tokens, the oracle %d (routing not applied?)", m.Candidate, m.Oracle)
	case m.Candidate != m.Oracle:
		what = fmt.Sprintf("a different number of tokens (the candidate %d, the oracle %d)", m.Candidate, m.Oracle)
	}
	var gap string
	switch {
	case math.IsInf(m.Gap, 1):
		if what == "" {
			return "no gap to measure (the case stores no scores for this decision)"
		}
		return what
	case m.Causal && m.NearTie:
		gap = fmt.Sprintf("a score %.3g from 0, inside the near-tie margin: two correct float32 implementations may differ here", m.Gap)
	case m.Causal:
		gap = fmt.Sprintf("no differing decision within %.3g of the threshold 0: decisive", m.Gap)
	case m.NearTie:
		gap = fmt.Sprintf("gap %.3g, inside the near-tie margin: two correct float32 implementations may differ here", m.Gap)
	case what != "":
		gap = fmt.Sprintf("gap %.3g in router weights: decisive", m.Gap)
	default:
		gap = fmt.Sprintf("gap %.3g in router weights: a decisive flip", m.Gap)
	}
	if what == "" {
		return gap
	}
	return what + "; " + gap
}

// junitSuite is the subset of the JUnit XML schema that CI dashboards read.
type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	Skipped   *junitFailure `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// writeJUnit writes one test case per golden case, those --present left
// out as skipped.
func writeJUnit(path string, results []*judge.CaseResult, leftOut []string) error {
	suite := junitSuite{Name: "modref golden corpus", Tests: len(results) + len(leftOut), Skipped: len(leftOut)}
	for _, r := range results {
		jc := junitCase{Name: r.Case, ClassName: "modref.check"}
		switch {
		case r.Error != "":
			suite.Errors++
			jc.Error = &junitFailure{Message: "bad input", Text: r.Error}
		case !r.Pass:
			suite.Failures++
			var lines []string
			for _, a := range r.Arrays {
				if a.Status != judge.StatusPass {
					lines = append(lines, fmt.Sprintf("%s: %s, max abs %.3g at %v (got %.8g, want %.8g)", a.Name, a.Status, a.MaxAbs, a.Where, a.Got, a.Want))
				}
			}
			jc.Failure = &junitFailure{Message: fmt.Sprintf("%d arrays outside tolerance", len(lines)), Text: strings.Join(lines, "\n")}
		}
		suite.Cases = append(suite.Cases, jc)
	}
	for _, name := range leftOut {
		suite.Cases = append(suite.Cases, junitCase{Name: name, ClassName: "modref.check", Skipped: &junitFailure{Message: "no candidate file (--present)"}})
	}
	raw, err := xml.MarshalIndent(suite, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append([]byte(xml.Header), append(raw, '\n')...)); err != nil {
		return fmt.Errorf("JUnit report: %w", err)
	}
	return nil
}
