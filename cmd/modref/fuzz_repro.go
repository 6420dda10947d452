package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/internal/candidate"
	"github.com/modref/modref/internal/readfile"
)

// fuzzDiagnosis is diagnose's reading of the smallest failing case.
type fuzzDiagnosis struct {
	named   []string
	stage   *judge.Departure
	verdict string
	// text is what modref diagnose prints; jsonText what --json prints.
	text, jsonText []byte
	err            error
}

// diagnoseShrunk runs diagnose on a failing case's candidate output, under
// the precision profile its manifest names (as judge judges).
func diagnoseShrunk(oc outcome) *fuzzDiagnosis {
	d := &fuzzDiagnosis{}
	c, _, _, err := underProfile(oc.c, format.Profile{})
	var results []diagnose.DeviationResult
	if err == nil {
		results, err = diagnose.Diagnose(c, oc.cand)
	}
	if err != nil {
		d.err, d.verdict = err, "diagnose: "+err.Error()
		return d
	}
	name, path := c.Manifest.Name, "candidate/"+oc.c.Manifest.Name+".npz"
	missing := requiredMissing(c, results[0].Absent)
	d.stage = judge.Depart(c, oc.cand, oc.result)
	partial, err := diagnose.Explain(c, oc.cand, results)
	if err != nil {
		d.err, d.verdict = err, "diagnose: "+err.Error()
		return d
	}
	var text, js bytes.Buffer
	printDiagnosis(&text, name, path, results, oc.result, missing, d.stage, partial)
	printDiagnosisJSON(&js, name, path, results, missing, d.stage, partial)
	d.text, d.jsonText = text.Bytes(), js.Bytes()
	for _, r := range results[1:] {
		if r.Match && r.Distinct {
			d.named = append(d.named, deviationLabel(r))
		}
	}
	for _, l := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(l, "verdict: ") || strings.HasPrefix(l, "where it first departs") {
			d.verdict = strings.TrimSpace(d.verdict + "\n" + l)
		}
	}
	return d
}

// reproducerReadme is the README.txt of a reproducer directory.
const reproducerReadme = `A case on which the candidate fails, found and shrunk by modref fuzz.

  %[1]s.json, %[1]s.npz   the case (docs/golden-format.md); this directory is a corpus
  candidate/%[1]s.npz     the candidate's output on it (when it wrote one)
  handed/%[1]s.json, .npz the case as the candidate is handed it: the arrays without the expected ones
  config.json              the case's configuration: modref gen --config config.json --out DIR makes the case again
  verdict.json             the failure: its kind, the sizes before and after shrinking, check's and diagnose's results
%[7]s  stderr.txt               the tail of the candidate's stderr on the case

Replay the judgement, without the fuzzer (from this directory):

  modref check --corpus . --candidate candidate %[1]s
  modref diagnose --corpus . --candidate candidate %[1]s

Run the candidate on the case again (from this directory):

  %[2]s

The fuzz run that found it:

  modref fuzz %[3]s

Failure: %[4]s
Shrunk from %[5]s
         to %[6]s
`

// writeReproducer writes the reproducer directory of a failing case under
// --out: a new directory, named after the case (with -2, -3, ... when the
// name is taken), so that nothing already there is touched. Every file is
// written through atomicfile.
func writeReproducer(o fuzzOptions, g *golden.GenConfig, oc outcome, f *fuzzFailure, d *fuzzDiagnosis) (string, error) {
	if oc.c == nil {
		return "", errors.New("no case")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	dir := filepath.Join(o.out, g.Name)
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 1000 {
			return "", fmt.Errorf("--out: %w", err)
		}
		dir = filepath.Join(o.out, fmt.Sprintf("%s-%d", g.Name, i))
	}
	if err := oc.c.Write(dir); err != nil {
		return dir, err
	}
	name := g.Name
	req := candidate.Request{Manifest: filepath.Join(handedDir, name+".json"), Arrays: filepath.Join(handedDir, name+".npz"), Out: filepath.Join("candidate", name+".npz")}
	files := map[string][]byte{}
	// candidate/ is made even when the candidate wrote nothing, for the
	// command that runs it again to write into; handedDir holds the case
	// as the candidate is handed it, without the expected arrays.
	for _, sub := range []string{"candidate", handedDir} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return dir, err
		}
	}
	manifest, err := readfile.Read(filepath.Join(dir, name+".json"), maxManifestCopy)
	if err != nil {
		return dir, err
	}
	files[req.Manifest] = manifest
	if err := format.WriteNPZ(filepath.Join(dir, req.Arrays), oc.c.CandidateArrays()); err != nil {
		return dir, err
	}
	if oc.candFile != "" {
		raw, err := readfile.Read(oc.candFile, candidateFileBound(oc.c))
		switch {
		case errors.Is(err, readfile.ErrTooLarge):
			f.CandidateNotKept = err.Error()
		case err != nil:
			return dir, err
		default:
			files[req.Out] = raw
		}
	}
	cfg, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return dir, err
	}
	files["config.json"] = append(cfg, '\n')
	verdict := struct {
		*fuzzFailure
		Check     *judge.CaseResult `json:"check,omitempty"`
		Diagnosis json.RawMessage   `json:"diagnosis,omitempty"`
	}{fuzzFailure: f, Check: oc.result}
	// The README lists diagnose.txt only when it is written: for a
	// mismatch that diagnose read without an error.
	diagnosed := ""
	if d != nil && d.jsonText != nil {
		verdict.Diagnosis = d.jsonText
		files["diagnose.txt"] = d.text
		diagnosed = "  diagnose.txt             modref diagnose's report\n"
	}
	if files["verdict.json"], err = json.MarshalIndent(verdict, "", "  "); err != nil {
		return dir, err
	}
	files["stderr.txt"] = []byte(oc.reply.Stderr)
	rerun := candidate.Command(o.exec, req)
	if !candidate.PerCase(o.exec) {
		rerun = candidate.ServerCommand(o.exec, req)
	}
	what := f.Kind + ": " + f.Reason
	if f.Verdict != "" {
		what += "\n" + f.Verdict
	}
	files["README.txt"] = fmt.Appendf(nil, reproducerReadme, name, rerun, shellJoin(o.args), what, f.Original, f.Shrunk, diagnosed)
	for file, data := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, file), data); err != nil {
			return dir, err
		}
	}
	return dir, nil
}

// handedDir is the reproducer's directory of the case as the candidate
// is handed it: the manifest, and the arrays without the expected ones.
const handedDir = "handed"

// maxManifestCopy bounds the manifest the reproducer copies into
// handedDir: the bound a reader of manifests holds them to
// (docs/golden-format.md, "Reading untrusted files").
const maxManifestCopy = 1 << 20

// candidateFileBound is the largest candidate file the reproducer of case
// c keeps: twice what the arrays the case judges take as float64 (a
// selection as wide as the sequence), and 1 MiB for the archive's
// headers. A larger file (a sparse file of 900 MiB, say) is not copied:
// it is not a candidate of the case.
func candidateFileBound(c *format.Case) int64 {
	n := int64(0)
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		k := int64(1)
		for _, d := range info.Shape {
			k *= int64(d)
		}
		if strings.HasSuffix(info.Name, "selected") && len(info.Shape) == 2 {
			k = max(k, int64(info.Shape[0])*int64(c.Manifest.Config.SeqLen))
		}
		n += 8 * k
	}
	return 2*n + 1<<20
}

// printable returns s with its control characters escaped as Go writes
// them (\x1b, \u009b; tabs kept), so that what a candidate wrote cannot
// drive the terminal the summary is printed on (--json escapes them too).
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r >= 0x20 && r < 0x7f || r >= 0xa0 && r != utf8.RuneError && unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// shellJoin quotes args for a POSIX shell where they need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// shownSkipReasons is how many of the candidate's reasons for declining
// cases the text lists, the most frequent first.
const shownSkipReasons = 5

// printFuzzSummary writes the run's summary as text or JSON.
func printFuzzSummary(w io.Writer, s *fuzzSummary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(w, "fuzz: seed %d, shard %s, max seq %d: %d cases in %.1f s (%.1f cases/s), %d judged over %d configurations, %d skipped as unsupported, %d failing\n",
		s.Seed, s.Shard, s.MaxSeq, s.Cases, s.Seconds, s.CasesPerSecond, s.Judged, s.Configurations, s.skipped(), len(s.Failures))
	if len(s.Kinds) > 0 {
		fmt.Fprintf(w, "judged: %d layer, %d model, %d decode, %d mode cases\n", s.Kinds[format.KindLayer], s.Kinds[format.KindModel], s.Kinds[format.KindDecode], s.Kinds[format.KindMoDE])
	}
	reasons := s.skipReasons()
	for _, r := range reasons[:min(len(reasons), shownSkipReasons)] {
		fmt.Fprintf(w, "skipped %d: %s\n", s.Skipped[r], printable(r))
	}
	if len(reasons) > shownSkipReasons {
		fmt.Fprintf(w, "skipped for %d other reasons (--json lists them all)\n", len(reasons)-shownSkipReasons)
	}
	if c := s.ClosestPass; c != nil {
		fmt.Fprintf(w, "closest to its tolerance of the cases that passed: %s %s at %.2g of it\n", c.Case, c.Array, c.Ratio)
	}
	if s.Redrawn > 0 {
		fmt.Fprintf(w, "redrawn: %d draws had no case (no draw clear of a routing tie, or a configuration ref refuses)\n", s.Redrawn)
	}
	for _, f := range s.Failures {
		fmt.Fprintf(w, "\nFAIL %s (case %d): %s: %s\n", f.Case, f.Index, f.Kind, printable(f.Reason))
		if f.Tried > 0 {
			fmt.Fprintf(w, "  shrunk from %s\n           to %s (%d steps kept of %d tried)\n", f.Original, f.Shrunk, len(f.ShrinkSteps), f.Tried)
		} else {
			fmt.Fprintf(w, "  size %s (not shrunk)\n", f.Shrunk)
		}
		for _, l := range strings.Split(f.Verdict, "\n") {
			if l != "" {
				fmt.Fprintf(w, "  diagnose: %s\n", strings.TrimPrefix(l, "verdict: "))
			}
		}
		if f.Stderr != "" {
			fmt.Fprintf(w, "  candidate's stderr (tail):\n")
			lines := strings.Split(strings.TrimRight(f.Stderr, "\n"), "\n")
			for _, l := range lines[max(0, len(lines)-8):] {
				fmt.Fprintf(w, "    %s\n", printable(l))
			}
		}
		switch {
		case f.Reproducer != "" && (f.Kind == kindMismatch || f.Kind == kindBadOutput):
			fmt.Fprintf(w, "  reproducer: %s\n  replay: modref check --corpus %s --candidate %s %s\n", f.Reproducer, f.Reproducer, filepath.Join(f.Reproducer, "candidate"), f.Case)
		case f.Reproducer != "":
			fmt.Fprintf(w, "  reproducer: %s (its README.txt runs the candidate on the case again)\n", f.Reproducer)
		default:
			fmt.Fprintf(w, "  no reproducer: %s\n", f.ReproducerError)
		}
		if f.CandidateNotKept != "" {
			fmt.Fprintf(w, "  the candidate's file is not kept: %s\n", f.CandidateNotKept)
		}
	}
	return nil
}
