package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// runDiagnose implements `modref diagnose`: judge a candidate against a case
// and against the case recomputed under each deviation of docs/spec.md
// §11, and name the deviation it matches.
func runDiagnose(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("diagnose", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref diagnose [--corpus DIR] [--json] [--allow-missing] [--precision P] --candidate FILE.npz CASE

Judges a candidate against the case and against the case recomputed under
each deviation of docs/spec.md §11 that can be emulated for it (the
deviation's forward values, and its gradients by the deviant layer's
backward pass with the routing frozen), and names the deviation the candidate matches. When
none does, it combines the deviations closest to the candidate with every
other one, then the closest pairs with a third, and so on up to five,
and names a combination that matches, joined with "+".
When none matches, it names the deviations whose effect the candidate
shows beside a mistake no deviation names ("present: X, Y"), testing each
as a factor: applied to the oracle, it moves arrays onto the candidate's
and none away (docs/golden-format.md, "Named deviations and a remainder"),
and says where the candidate departs besides them; otherwise it lists the
arrays furthest from the oracle and says where the candidate first departs
from it, stage by stage in the order the layers compute (router weights,
selection, weights, output, auxiliary losses, loss, then the gradients in
backward order), and how. --json prints all of it, the stage and the
deviations present (partial) as fields.
--candidate may also be a directory holding CASE.npz. Arrays a port need
not compute (a layer's weights and multipliers, its targets where no loss
reads them) may be left out and are not judged; with --allow-missing any
other array may be too, and the candidate is judged on the arrays it has.
--precision P judges by the tolerances of a precision profile (a bf16 or
fp16 implementation, TF32 products); a candidate whose routing differs
from the truth's only at near-ties that precision cannot resolve, and that
matches the truth at its own decisions, matches. Nothing is written.

Exit status: 0 the candidate matches the oracle (and has every array the
case requires), 1 it does not (whether or not a deviation is named), 2 bad
input or usage.

flags:
`)
		fs.PrintDefaults()
	}
	corpus := corpusFlag(fs)
	candidate := fs.String("candidate", "", "candidate .npz `FILE` (or a directory holding CASE.npz)")
	allowMissing := fs.Bool("allow-missing", false, "judge a candidate that lacks arrays the case requires on the arrays it has, listing the others")
	asJSON := fs.Bool("json", false, "print the diagnosis as JSON: every result, the deviations named, and where the candidate first departs from the oracle")
	profileOf := precisionFlag(fs)
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	for _, name := range []string{"candidate", "precision"} {
		if err := refuseEmpty(fs, name); err != nil {
			return err
		}
	}
	profile, err := profileOf()
	if err != nil {
		return err
	}
	if len(names) != 1 || *candidate == "" {
		fmt.Fprintln(stderr, "usage: modref diagnose [--corpus DIR] [--json] [--allow-missing] [--precision P] --candidate FILE.npz CASE")
		return errUsage
	}
	name := names[0]
	c, err := corpus().Load(name)
	if err != nil {
		return err
	}
	path := *candidate
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("candidate %s: %w", path, errors.Unwrap(err))
	}
	if fi.IsDir() {
		path = filepath.Join(path, name+".npz")
	}
	cand, err := format.ReadCandidate(path, c)
	if err != nil {
		return err
	}
	if c, _, profile, err = underProfile(c, profile); err != nil {
		return err
	}
	if !*asJSON {
		printProfile(stdout, profile)
	}
	oracle, err := judge.Compare(c, cand, *allowMissing)
	if err == nil && !oracle.Pass {
		// Near-tie flips are judged at the candidate's own decisions
		// (judge.JudgeFlips): a candidate that passes there is correct.
		var rejudged *judge.CaseResult
		if rejudged, err = judge.JudgeFlips(c, cand, oracle, *allowMissing); err == nil && rejudged.Pass {
			return printFlipMatch(stdout, name, path, rejudged.Flips, *asJSON)
		}
	}
	if err != nil {
		return fmt.Errorf("%s (case %s): %w", path, name, err)
	}
	results, err := diagnose.DiagnoseWithOptions(c, cand, diagnose.DiagnoseOptions{AllowMissing: *allowMissing, Progress: phasedProgress(stderr, name)})
	if err != nil {
		return fmt.Errorf("%s (case %s): %w", path, name, err)
	}
	missing := requiredMissing(c, results[0].Absent)
	departure := judge.Depart(c, cand, oracle)
	partial, err := diagnose.Explain(c, cand, results)
	if err != nil {
		return fmt.Errorf("%s (case %s): %w", path, name, err)
	}
	if *asJSON {
		if err := printDiagnosisJSON(stdout, name, path, results, missing, departure, partial); err != nil {
			return err
		}
	} else {
		printDiagnosis(stdout, name, path, results, oracle, missing, departure, partial)
	}
	if results[0].Match && len(missing) == 0 {
		return nil
	}
	return errMismatch
}

// phasedProgress is diagnose's progress line on a terminal (nil
// otherwise): the deviations recomputed, then the combinations.
func phasedProgress(stderr io.Writer, name string) func(done, total int) {
	single := progressLine(stderr, "diagnose "+name+": deviations recomputed")
	if single == nil {
		return nil
	}
	return phases(single, progressLine(stderr, "diagnose "+name+": combinations of deviations recomputed"))
}

// phases passes diagnose.DiagnoseProgress's first series of calls to single
// and the later ones (one per size of combination), each starting again
// from done 0, to combos.
func phases(single, combos func(done, total int)) func(done, total int) {
	phase := 0
	return func(done, total int) {
		if done == 0 {
			phase++
		}
		if phase > 1 {
			combos(done, total)
			return
		}
		single(done, total)
	}
}

// requiredMissing lists the absent arrays the case requires: those a port
// may not leave out (judge.Optional), which only --allow-missing lets be
// absent.
func requiredMissing(c *format.Case, absent []string) []string {
	var out []string
	for _, n := range absent {
		if !judge.Optional(c, "expected."+n) {
			out = append(out, n)
		}
	}
	return out
}

// deviationLabel is a deviation's name with its variant, and
// weight_scaled's fitted α.
func deviationLabel(r diagnose.DeviationResult) string {
	label := r.Name
	if r.Variant != "" {
		label += " (" + r.Variant + ")"
	}
	if r.Scale != 0 {
		label += " (" + diagnose.ScaleLabel(r.Scale) + ")"
	}
	return label
}

// worstText describes the worst array of a result.
func worstText(r diagnose.DeviationResult) string {
	a := r.Worst
	if a.Name == "" {
		return ""
	}
	e := diagnose.Excess(a)
	if math.IsInf(e, 1) {
		return fmt.Sprintf("%s\tdiffers at %v (got %.8g, want %.8g; must match exactly)", a.Name, a.Where, a.Got, a.Want)
	}
	return fmt.Sprintf("%s\tmax abs %.2e at %v (got %.8g, want %.8g), %.2g× its tolerance", a.Name, a.MaxAbs, a.Where, a.Got, a.Want, e)
}

// leadFraction is the share of a case's arrays a deviation must explain
// (within tolerance of its emulation) to be named as the closest one when
// none matches: below it, a deviation that happens to agree on a few arrays
// the bug leaves alone is no lead (docs/golden-format.md).
const leadFraction = 0.5

// worstArrays is how many of the arrays furthest from the oracle the verdict
// lists when no deviation explains the candidate.
const worstArrays = 3

// printDiagnosis writes the oracle's verdict, one line per deviation and the
// final verdict; oracle is the candidate judged against the case, whose
// worst arrays the verdict lists when no deviation explains the candidate,
// and partial the deviations present besides a remainder (diagnose.Explain),
// or nil.
func printDiagnosis(w io.Writer, name, path string, results []diagnose.DeviationResult, oracle *judge.CaseResult, missing []string, departure *judge.Departure, partial *diagnose.Partial) {
	self := results[0]
	fmt.Fprintf(w, "case %s, candidate %s\n", name, path)
	if len(self.Absent) > 0 {
		fmt.Fprintf(w, "not judged, left out by the candidate: %s\n", strings.Join(self.Absent, ", "))
	}
	if self.Match {
		fmt.Fprintf(w, "oracle: matches (%d/%d arrays within tolerance)\n\n", self.Matching, self.Total)
	} else {
		fmt.Fprintf(w, "oracle: does not match (%d/%d arrays within tolerance; worst %s)\n\n",
			self.Matching, self.Total, strings.ReplaceAll(worstText(self), "\t", ": "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "deviation\tresult\tarrays\tworst array\terror")
	var matched, indistinct []string
	closest := self
	for _, r := range results[1:] {
		switch {
		case !r.Emulated:
			fmt.Fprintf(tw, "%s\tnot emulated\t\t\t%s\n", deviationLabel(r), r.Reason)
			continue
		case r.Match && !r.Distinct:
			indistinct = append(indistinct, deviationLabel(r))
			fmt.Fprintf(tw, "%s\tmatches (this case cannot tell it from the oracle)\t%d/%d\t%s\n", deviationLabel(r), r.Matching, r.Total, worstText(r))
		case r.Match:
			matched = append(matched, deviationLabel(r))
			fmt.Fprintf(tw, "%s\tMATCHES\t%d/%d\t%s\n", deviationLabel(r), r.Matching, r.Total, worstText(r))
		case !r.Distinct:
			fmt.Fprintf(tw, "%s\tsame as oracle\t%d/%d\t%s\n", deviationLabel(r), r.Matching, r.Total, worstText(r))
		default:
			fmt.Fprintf(tw, "%s\tdoes not match\t%d/%d\t%s\n", deviationLabel(r), r.Matching, r.Total, worstText(r))
		}
		if r.Distinct && r.Matching > closest.Matching {
			closest = r
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	switch {
	case self.Match && len(missing) > 0:
		fmt.Fprintf(w, "verdict: the candidate matches the oracle on the arrays it has, but lacks %d the case requires (%s): not a pass\n", len(missing), strings.Join(missing, ", "))
	case self.Match && len(indistinct) > 0:
		fmt.Fprintf(w, "verdict: the candidate matches the oracle (on this case it cannot be told from %s)\n", strings.Join(indistinct, ", "))
	case self.Match:
		fmt.Fprintln(w, "verdict: the candidate matches the oracle")
	case len(matched) > 0:
		apart := ""
		if len(matched) > 1 {
			apart = " (this case cannot tell them apart)"
		}
		fmt.Fprintf(w, "verdict: the candidate does not match the oracle; it matches %s%s\n", strings.Join(matched, ", "), apart)
		for _, r := range results[1:] {
			if r.Match && r.Distinct {
				fmt.Fprintf(w, "  %s: %s\n", deviationLabel(r), format.DeviationDescription(r.Name))
			}
		}
	case partial != nil && partial.Remainder != nil:
		present := presentLabel(partial)
		at := partial.Remainder.Stage
		if partial.Remainder.Layer >= 0 {
			at = fmt.Sprintf("layer %d, %s", partial.Remainder.Layer, at)
		}
		fmt.Fprintf(w, "verdict: the candidate matches neither the oracle nor any emulated deviation; present: %s; and besides them, the candidate first departs at %s (%s)\n", present, at, partial.Remainder.Array)
		for _, n := range partial.Present {
			fmt.Fprintf(w, "  %s: %s\n", n, format.DeviationDescription(n))
		}
		explained := partial.Explained
		if len(explained) > shownLater {
			explained = append(explained[:shownLater-1:shownLater-1], fmt.Sprintf("%s and %d more", explained[shownLater-1], len(partial.Explained)-shownLater))
		}
		fmt.Fprintf(w, "  applied to the oracle, they move onto the candidate's: %s\n", strings.Join(explained, ", "))
		printDeparture(w, partial.Remainder, " from the oracle with "+present+" applied")
		return
	case closest.Name != diagnose.OracleName && float64(closest.Matching) >= leadFraction*float64(closest.Total):
		fmt.Fprintf(w, "verdict: the candidate matches neither the oracle nor any emulated deviation; closest is %s (%d/%d arrays)\n",
			deviationLabel(closest), closest.Matching, closest.Total)
		fmt.Fprintf(w, "array furthest from %s: %s\n", deviationLabel(closest), strings.ReplaceAll(worstText(closest), "\t", ": "))
		fmt.Fprintln(w, "arrays furthest from the oracle (error over tolerance):")
		for _, a := range furthest(oracle, worstArrays) {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(worstText(diagnose.DeviationResult{Worst: a}), "\t", ": "))
		}
	default:
		fmt.Fprintln(w, "verdict: the candidate matches neither the oracle nor any emulated deviation, and no known deviation explains it")
		fmt.Fprintln(w, "arrays furthest from the oracle (error over tolerance):")
		for _, a := range furthest(oracle, worstArrays) {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(worstText(diagnose.DeviationResult{Worst: a}), "\t", ": "))
		}
	}
	if len(matched) == 0 && departure != nil {
		printDeparture(w, departure, "")
	}
}

// presentLabel joins the deviations of a partial explanation, with
// gather_first_k's variant.
func presentLabel(p *diagnose.Partial) string {
	names := slices.Clone(p.Present)
	if i := slices.Index(names, "gather_first_k"); i >= 0 && p.Variant != "" {
		names[i] += " (" + p.Variant + ")"
	}
	if i := slices.Index(names, "weight_scaled"); i >= 0 && p.Scale != 0 {
		names[i] += " (" + diagnose.ScaleLabel(p.Scale) + ")"
	}
	return strings.Join(names, ", ")
}

// shownLater is how many of the arrays outside tolerance after the first
// departure the text lists by name.
const shownLater = 6

// printDeparture says where the candidate first departs from the oracle, or
// from what from names (" from …", empty for the oracle).
func printDeparture(w io.Writer, d *judge.Departure, from string) {
	at := d.Stage
	if d.Layer >= 0 {
		at = fmt.Sprintf("layer %d, %s", d.Layer, d.Stage)
	}
	fmt.Fprintf(w, "where it first departs%s, in the order the layers compute: %s (%s): %s\n", from, at, d.Array, d.How)
	if len(d.Right) > 0 {
		fmt.Fprintf(w, "  right before it: %s\n", strings.Join(d.Right, ", "))
	}
	switch later := d.Later; {
	case len(later) == 0:
		fmt.Fprintln(w, "  every array after it is within tolerance")
	case len(later) > shownLater:
		fmt.Fprintf(w, "  also outside tolerance after it: %s and %d more\n", strings.Join(later[:shownLater], ", "), len(later)-shownLater)
	default:
		fmt.Fprintf(w, "  also outside tolerance after it: %s\n", strings.Join(later, ", "))
	}
}

// diagnosisJSON is what diagnose --json prints.
type diagnosisJSON struct {
	Case      string `json:"case"`
	Candidate string `json:"candidate"`
	// Pass is true when the candidate matches the oracle and has every
	// array the case requires (exit status 0).
	Pass bool `json:"pass"`
	// Named lists the deviations (or combinations) the candidate matches
	// that the case tells from the oracle.
	Named []string `json:"named"`
	// Missing lists the required arrays left out (--allow-missing).
	Missing []string `json:"missing"`
	// Stage is where the candidate first departs from the oracle; null
	// when it does not.
	Stage   *judge.Departure           `json:"stage"`
	Results []diagnose.DeviationResult `json:"results"`
	// Partial is, when no deviation matches, the deviations present besides
	// a remainder and where the candidate first departs from the oracle
	// with them applied (diagnose.Explain); null when none is found.
	Partial *diagnose.Partial `json:"partial"`
	// Flips is set when the candidate matches the oracle at its own
	// routing decisions, which differ from the truth's at near-ties
	// (judge.JudgeFlips); no deviation is then searched for.
	Flips *judge.FlipReport `json:"flips,omitempty"`
}

// printFlipMatch reports a candidate that matches the oracle once its
// near-tie flips are judged at its own decisions.
func printFlipMatch(w io.Writer, name, path string, f *judge.FlipReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(diagnosisJSON{Case: name, Candidate: path, Pass: true, Named: []string{}, Missing: []string{}, Results: []diagnose.DeviationResult{}, Flips: f})
	}
	fmt.Fprintf(w, "case %s, candidate %s\n", name, path)
	fmt.Fprintln(w, "oracle: matches at the candidate's own routing decisions")
	for _, l := range flipLines(f) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "verdict: the candidate matches the oracle; its routing differs from the truth's only at near-ties its precision cannot resolve")
	return nil
}

// printDiagnosisJSON writes the diagnosis as JSON.
func printDiagnosisJSON(w io.Writer, name, path string, results []diagnose.DeviationResult, missing []string, d *judge.Departure, partial *diagnose.Partial) error {
	out := diagnosisJSON{Case: name, Candidate: path, Pass: results[0].Match && len(missing) == 0,
		Named: []string{}, Missing: append([]string{}, missing...), Stage: d, Results: results, Partial: partial}
	for _, r := range results[1:] {
		if r.Match && r.Distinct {
			out.Named = append(out.Named, deviationLabel(r))
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// furthest returns up to n arrays of a comparison that failed, the furthest
// outside their tolerance first.
func furthest(res *judge.CaseResult, n int) []judge.ArrayResult {
	var out []judge.ArrayResult
	for _, a := range res.Arrays {
		if a.Status == judge.StatusFail {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b judge.ArrayResult) int { return cmp.Compare(diagnose.Excess(b), diagnose.Excess(a)) })
	return out[:min(n, len(out))]
}
