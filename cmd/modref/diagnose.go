package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/modref/modref/golden"
)

// runDiagnose implements `modref diagnose`: judge a candidate against a case
// and against the case recomputed under each deviation of SPEC.md section
// 11, and name the deviation it matches.
func runDiagnose(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: modref diagnose [-dir DIR] --candidate FILE.npz CASE

Judges a candidate against the case and against the case recomputed under
each deviation of SPEC.md section 11 that can be emulated for it (the
deviation's forward values, and its gradients by finite differences with
the routing frozen), and names the deviation the candidate matches.
--candidate may also be a directory holding CASE.npz. Nothing is written.

Exit status: 0 the candidate matches the oracle, 1 it does not (whether or
not a deviation is named), 2 bad input or usage.

flags:
`)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", golden.DefaultDir, "corpus directory")
	candidate := fs.String("candidate", "", "candidate .npz `FILE` (or a directory holding CASE.npz)")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if err := refuseEmpty(fs, "candidate"); err != nil {
		return err
	}
	if len(names) != 1 || *candidate == "" {
		fmt.Fprintln(stderr, "usage: modref diagnose [-dir DIR] --candidate FILE.npz CASE")
		return errUsage
	}
	name := names[0]
	c, err := golden.Load(*dir, name)
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
	cand, err := golden.ReadCandidate(path, c)
	if err != nil {
		return err
	}
	results, err := golden.Diagnose(c, cand)
	if err != nil {
		return fmt.Errorf("%s (case %s): %w", path, name, err)
	}
	printDiagnosis(stdout, name, path, results)
	if results[0].Match {
		return nil
	}
	return errMismatch
}

// deviationLabel is a deviation's name with its variant.
func deviationLabel(r golden.DeviationResult) string {
	if r.Variant != "" {
		return r.Name + " (" + r.Variant + ")"
	}
	return r.Name
}

// worstText describes the worst array of a result.
func worstText(r golden.DeviationResult) string {
	a := r.Worst
	if a.Name == "" {
		return ""
	}
	e := golden.Excess(a)
	if math.IsInf(e, 1) {
		return fmt.Sprintf("%s\tdiffers at %v (got %.8g, want %.8g; must match exactly)", a.Name, a.Where, a.Got, a.Want)
	}
	return fmt.Sprintf("%s\tmax abs %.2e at %v (got %.8g, want %.8g), %.2g× its tolerance", a.Name, a.MaxAbs, a.Where, a.Got, a.Want, e)
}

// printDiagnosis writes the oracle's verdict, one line per deviation and the
// final verdict.
func printDiagnosis(w io.Writer, name, path string, results []golden.DeviationResult) {
	oracle := results[0]
	fmt.Fprintf(w, "case %s, candidate %s\n", name, path)
	if oracle.Match {
		fmt.Fprintf(w, "oracle: matches (%d/%d arrays within tolerance)\n\n", oracle.Matching, oracle.Total)
	} else {
		fmt.Fprintf(w, "oracle: does not match (%d/%d arrays within tolerance; worst %s)\n\n",
			oracle.Matching, oracle.Total, strings.ReplaceAll(worstText(oracle), "\t", ": "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "deviation\tresult\tarrays\tworst array\terror")
	var matched, indistinct []string
	closest := oracle
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
	case oracle.Match && len(indistinct) > 0:
		fmt.Fprintf(w, "verdict: the candidate matches the oracle (on this case it cannot be told from %s)\n", strings.Join(indistinct, ", "))
	case oracle.Match:
		fmt.Fprintln(w, "verdict: the candidate matches the oracle")
	case len(matched) > 0:
		fmt.Fprintf(w, "verdict: the candidate does not match the oracle; it matches %s\n", strings.Join(matched, ", "))
		for _, r := range results[1:] {
			if r.Match && r.Distinct {
				fmt.Fprintf(w, "  %s: %s\n", deviationLabel(r), golden.DeviationDescription(r.Name))
			}
		}
	case closest.Name != golden.OracleName:
		fmt.Fprintf(w, "verdict: the candidate matches neither the oracle nor any emulated deviation; closest is %s (%d/%d arrays)\n",
			deviationLabel(closest), closest.Matching, closest.Total)
	default:
		fmt.Fprintln(w, "verdict: the candidate matches neither the oracle nor any emulated deviation")
	}
}
