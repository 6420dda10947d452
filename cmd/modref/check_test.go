package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
)

const corpus = "../../golden/corpus"

// writeCandidate writes the case's own expected values, changed by edit, as
// a candidate file and returns its path.
func writeCandidate(t *testing.T, name string, edit func(map[string]*format.Array)) string {
	t.Helper()
	c, err := format.Load(corpus, name)
	if err != nil {
		t.Fatal(err)
	}
	cand := make(map[string]*format.Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			cand[format.CandidateName(info.Name)] = c.Arrays[info.Name]
		}
	}
	if edit != nil {
		edit(cand)
	}
	path := filepath.Join(t.TempDir(), name+".npz")
	if err := format.WriteNPZ(path, cand); err != nil {
		t.Fatal(err)
	}
	return path
}

// corpusDigest hashes every corpus file, to show that nothing wrote to it.
func corpusDigest(t *testing.T) [32]byte {
	t.Helper()
	h := sha256.New()
	entries, err := os.ReadDir(corpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(corpus, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(e.Name()))
		h.Write(raw)
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheckCandidate(t *testing.T) {
	before := corpusDigest(t)
	good := writeCandidate(t, "layer-paper", nil)
	if code, out, errOut := runCmd("check", "-dir", corpus, "--candidate", good, "layer-paper"); code != 0 || !strings.Contains(out, "1 passed, 0 failed") {
		t.Errorf("exact candidate: exit %d\n%s%s", code, out, errOut)
	}
	bad := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) {
		m["grad.param.Wq"].F[5] += 1
	})
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, out, _ := runCmd("check", "-dir", corpus, "--candidate", bad, "--junit", junit, "layer-paper")
	if code != 1 || !strings.Contains(out, "grad.param.Wq") || !strings.Contains(out, "[0 5]") || !strings.Contains(out, "FAIL") {
		t.Errorf("changed gradient: exit %d, output\n%s", code, out)
	}
	raw, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite junitSuite
	if err := xml.Unmarshal(raw, &suite); err != nil {
		t.Fatal(err)
	}
	if suite.Tests != 1 || suite.Failures != 1 || suite.Cases[0].Failure == nil || !strings.Contains(suite.Cases[0].Failure.Text, "grad.param.Wq") {
		t.Errorf("JUnit report %+v", suite)
	}
	if code, out, _ := runCmd("check", "-dir", corpus, "--candidate", bad, "--json", "layer-paper"); code != 1 || !strings.Contains(out, `"status": "fail"`) {
		t.Errorf("--json: exit %d\n%s", code, out)
	}
	if corpusDigest(t) != before {
		t.Error("check changed the corpus")
	}
}

func TestCheckCandidateDirectory(t *testing.T) {
	a := writeCandidate(t, "layer-paper", nil)
	dir := filepath.Dir(a)
	b := writeCandidate(t, "layer-softmax", nil)
	if err := os.Rename(b, filepath.Join(dir, "layer-softmax.npz")); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd("check", "-dir", corpus, "--candidate", dir, "layer-paper", "layer-softmax"); code != 0 || !strings.Contains(out, "2 passed, 0 failed") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	// A case with no file in the directory is bad input.
	if code, _, errOut := runCmd("check", "-dir", corpus, "--candidate", dir, "layer-none"); code != 2 || !strings.Contains(errOut, "layer-none.npz") {
		t.Errorf("missing candidate file: exit %d, %q", code, errOut)
	}
}

func TestCheckBadInput(t *testing.T) {
	dir, good, corrupt, nan, missing := badCandidates(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--candidate", filepath.Join(dir, "nope.npz"), "layer-paper"}, []string{"nope.npz"}},
		{[]string{"--candidate", corrupt, "layer-paper"}, []string{"corrupt.npz", "not a readable .npz"}},
		{[]string{"--candidate", nan, "layer-paper"}, []string{`"out"`, "NaN", "[0 0 3]"}},
		{[]string{"--candidate", missing, "layer-paper"}, []string{`"router_logits" is missing`}},
		{[]string{"--candidate", good}, []string{"name exactly one case"}},
		{[]string{"--candidate", good, "layer-paper", "layer-none"}, []string{"name exactly one case"}},
		{[]string{"no-such-case"}, []string{`no such case "no-such-case"`, "modref list"}},
		{[]string{"layer-papr"}, []string{"did you mean layer-paper?"}},
		{[]string{"--bogus"}, nil},
	} {
		code, _, errOut := runCmd(append([]string{"check", "-dir", corpus}, c.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q does not mention %q", c.args, errOut, w)
			}
		}
		if strings.Contains(errOut, "goroutine") {
			t.Errorf("%v: a stack trace on stderr", c.args)
		}
	}
	if code, out, _ := runCmd("check", "-dir", corpus, "--candidate", missing, "--allow-missing", "layer-paper"); code != 1 || !strings.Contains(out, "missing") {
		t.Errorf("--allow-missing: exit %d\n%s", code, out)
	}
}

func TestListAndExplain(t *testing.T) {
	code, out, _ := runCmd("list", "-dir", corpus)
	if code != 0 || !strings.Contains(out, "layer-paper") || !strings.Contains(out, "decode-router") {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	// Patterns select cases (golden's TestSelect covers the selection), with
	// flags before or after them; one matching nothing is bad input.
	code, out, _ = runCmd("list", "decode-p*", "-dir", corpus, "layer-paper")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 ||
		!strings.HasPrefix(lines[1], "decode-padding ") || !strings.HasPrefix(lines[2], "decode-predictor ") || !strings.HasPrefix(lines[3], "layer-paper ") {
		t.Errorf("list decode-p* layer-paper: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd("list", "layer-papr"); code != 2 || !strings.Contains(errOut, "did you mean layer-paper") {
		t.Errorf("list layer-papr: exit %d, stderr %q; want 2 naming layer-paper", code, errOut)
	}
	code, out, _ = runCmd("explain", "-dir", corpus, "layer-dense-ste")
	for _, w := range []string{"ste_m_plus_1", "docs/spec.md §7", "rotate-half", "w = g + sg(m·g − g)"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("explain: exit %d, output lacks %q", code, w)
		}
	}
	if code, _, _ := runCmd("explain", "-dir", corpus); code != 2 {
		t.Errorf("explain without a case: exit %d", code)
	}
	// The arrays a candidate writes, with which are optional.
	code, out, _ = runCmd("explain", "-dir", corpus, "layer-paper")
	for _, w := range []string{"  selected ", "int64 (or int32)", "  grad.param.Router  [8]", "  weights ", "optional: judged only when written"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("explain layer-paper: exit %d, output lacks %q", code, w)
		}
	}
	if strings.Contains(out, "  out ") && strings.Contains(strings.SplitN(out[strings.Index(out, "  out "):], "\n", 2)[0], "optional") {
		t.Error("explain layer-paper calls out optional")
	}
	// A model case's per-layer arrays are listed, optional; its other
	// per-layer arrays are not.
	code, out, _ = runCmd("explain", "-dir", corpus, "model-every-other")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "L2.") {
			continue
		}
		_, stage, _ := strings.Cut(f[0], ".")
		if want := slices.Contains(oracle.LayerStageArrays, stage); strings.Contains(line, "optional") != want {
			t.Errorf("explain model-every-other: %q, want optional %v", line, want)
		}
	}
	for _, w := range []string{"  L2.weights ", "  L2.multipliers ", "  L2.targets ", "  L2.out ", "  L2.selected "} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("explain model-every-other: exit %d, output lacks %q", code, w)
		}
	}
}

// TestCheckSelf is the README's main job: modref's own float32
// implementation against the whole corpus.
func TestCheckSelf(t *testing.T) {
	names, err := format.List(corpus)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd("check", "-dir", corpus)
	want := fmt.Sprintf("%d passed, 0 failed", len(names))
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "mod/") {
		t.Errorf("exit %d, want 0 and %q\n%s%s", code, want, out, errOut)
	}
}

// TestCheckFlagsAfterCase accepts the order, CASE then flags.
func TestCheckFlagsAfterCase(t *testing.T) {
	good := writeCandidate(t, "layer-paper", nil)
	if code, out, errOut := runCmd("check", "layer-paper", "-dir", corpus, "--candidate", good); code != 0 || !strings.Contains(out, "1 passed, 0 failed") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
}

// badCandidates writes, for layer-paper, an exact candidate and three bad
// ones: a truncated file, one holding a NaN in out[0 0 3], and one missing
// router_logits. dir is a directory where no other file exists.
func badCandidates(t *testing.T) (dir, good, corrupt, nan, missing string) {
	t.Helper()
	dir = t.TempDir()
	good = writeCandidate(t, "layer-paper", nil)
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	corrupt = filepath.Join(dir, "corrupt.npz")
	if err := os.WriteFile(corrupt, raw[:len(raw)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	nan = writeCandidate(t, "layer-paper", func(m map[string]*format.Array) { m["out"].F[3] = math.NaN() })
	missing = writeCandidate(t, "layer-paper", func(m map[string]*format.Array) { delete(m, "router_logits") })
	return dir, good, corrupt, nan, missing
}

// TestCheckDirectoryWithABadFile: a bad file is its case's error; every
// other case is still judged, in the table, the summary and the JUnit
// report, and the exit status is 2.
func TestCheckDirectoryWithABadFile(t *testing.T) {
	dir := filepath.Dir(writeCandidate(t, "layer-paper", nil))
	failing := writeCandidate(t, "layer-none", func(m map[string]*format.Array) { m["out"].F[0] += 1 })
	if err := os.Rename(failing, filepath.Join(dir, "layer-none.npz")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "layer-softmax.npz"), []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, out, errOut := runCmd("check", "-dir", corpus, "--candidate", dir+"/", "--junit", junit, "layer-paper", "layer-softmax", "layer-none")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{"layer-paper +\\(18 arrays.*pass", "layer-softmax +\\(bad input\\) +ERROR: .*layer-softmax.npz: not a readable .npz",
		"layer-none +out .*FAIL", "\n1 passed, 1 failed, 1 bad input\n"} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output does not match %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "layer-softmax.npz") {
		t.Errorf("stderr %q does not name the bad file", errOut)
	}
	raw, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite junitSuite
	if err := xml.Unmarshal(raw, &suite); err != nil {
		t.Fatal(err)
	}
	if suite.Tests != 3 || suite.Failures != 1 || suite.Errors != 1 || suite.Cases[1].Error == nil || !strings.Contains(suite.Cases[1].Error.Text, "layer-softmax.npz") {
		t.Errorf("JUnit report %+v", suite)
	}
}

// TestCheckRoutingMessages: an exactly tied boundary given to the higher
// position breaks the tie rule, and a decoder that routes every token routes
// a different number of tokens; neither is a near tie or a flip.
func TestCheckRoutingMessages(t *testing.T) {
	ties := writeCandidate(t, "layer-ties", func(m map[string]*format.Array) {
		// Row 0 of layer-ties selects [1 2 4 5]; position 3 is tied with 1.
		sel := m["selected"]
		sel.I = append([]int64(nil), sel.I...)
		copy(sel.I[:4], []int64{2, 3, 4, 5})
	})
	code, out, _ := runCmd("check", "-dir", corpus, "--candidate", ties, "layer-ties")
	if code != 1 || !strings.Contains(out, "row 0: routed only by the candidate [3], only by the oracle [1]; router weights exactly tied (gap 0): the tie rule decides") ||
		strings.Contains(out, "near-tie") {
		t.Errorf("tie broken: exit %d\n%s", code, out)
	}
	all := writeCandidate(t, "decode-router", func(m map[string]*format.Array) {
		for _, n := range []string{"L0.routed", "L2.routed"} {
			r := m[n]
			r.I = make([]int64, len(r.I))
			for k := range r.I {
				r.I[k] = 1
			}
		}
	})
	code, out, _ = runCmd("check", "-dir", corpus, "--candidate", all, "decode-router")
	if code != 1 || !strings.Contains(out, "the candidate routes all 8 tokens, the oracle") || strings.Contains(out, "flip") {
		t.Errorf("every token routed: exit %d\n%s", code, out)
	}
}

// TestCheckPresent: check --present --candidate DIR judges the cases whose
// file DIR holds and says which it left out (text, --json, --junit); the
// default still judges every case, a missing file being bad input;
// --present is refused without a directory, or with one holding no
// candidate. The table stays aligned across a flip report's lines, and its
// header names the files read, not DIR//CASE.npz.
func TestCheckPresent(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"layer-paper", "layer-softmax", "layer-window"} {
		if err := os.Rename(writeCandidate(t, name, nil), filepath.Join(dir, name+".npz")); err != nil {
			t.Fatal(err)
		}
	}
	ties, err := format.Load(corpus, "layer-ties-bf16")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(writeBF16Emulation(t, ties), filepath.Join(dir, "layer-ties-bf16.npz")); err != nil {
		t.Fatal(err)
	}
	all, err := golden.Embedded().List()
	if err != nil {
		t.Fatal(err)
	}
	left := len(all) - 4

	code, out, errOut := runBin(t, "check", "--present", "--precision", "bf16", "--candidate", dir+"/")
	if code != 0 || !strings.Contains(out, "4 passed, 0 failed") || !strings.Contains(out, "routing decisions flipped, each within the near-tie margin") {
		t.Fatalf("check --present: exit %d\n%s%s", code, out, errOut)
	}
	header := fmt.Sprintf("candidates: %s, %s and 2 more in %s, one per case", filepath.Join(dir, "layer-paper.npz"), filepath.Join(dir, "layer-softmax.npz"), dir)
	if !strings.Contains(out, header) || strings.Contains(out, "//") || strings.Contains(out, "CASE.npz") {
		t.Errorf("header: want %q, no DIR//CASE.npz, in\n%s", header, out)
	}
	if want := fmt.Sprintf("left out, no file in %s/: %d cases: decode-", dir, left); !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf(" and %d more (--json lists them all)", left-shownLeftOut)) {
		t.Errorf("want %q and how many more in\n%s", want, out)
	}
	// Every row of the table has its result where the header has
	// "result", the flip report's lines under layer-ties-bf16, before
	// layer-window's row, notwithstanding.
	col := -1
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "case "):
			col = strings.Index(line, "result")
		case strings.HasPrefix(line, "layer-"):
			if i := strings.LastIndex(line, "pass"); i != col {
				t.Errorf("row %q has its result at column %d, the header at %d:\n%s", line, i, col, out)
			}
		}
	}

	junit := filepath.Join(t.TempDir(), "report.xml")
	code, out, errOut = runBin(t, "check", "--present", "--json", "--junit", junit, "--precision", "bf16", "--candidate", dir)
	var report struct {
		Results []*judge.CaseResult `json:"results"`
		LeftOut []string            `json:"left_out"`
	}
	if err := json.Unmarshal([]byte(out), &report); code != 0 || err != nil || len(report.Results) != 4 || len(report.LeftOut) != left ||
		slices.Contains(report.LeftOut, "layer-paper") || !slices.Contains(report.LeftOut, "model-gqa") {
		t.Errorf("--present --json: exit %d, %v, %d results, %d left out, want 4 and %d\n%s", code, err, len(report.Results), len(report.LeftOut), left, errOut)
	}
	raw, _ := os.ReadFile(junit)
	var suite junitSuite
	if err := xml.Unmarshal(raw, &suite); err != nil || suite.Tests != len(all) || suite.Skipped != left || suite.Failures+suite.Errors != 0 {
		t.Errorf("--present --junit: %v, %d tests, %d skipped, want %d and %d", err, suite.Tests, suite.Skipped, len(all), left)
	}

	// The default judges every case: the others are bad input.
	code, out, _ = runBin(t, "check", "--precision", "bf16", "--candidate", dir)
	if code != 2 || !strings.Contains(out, fmt.Sprintf("4 passed, 0 failed, %d bad input", left)) {
		t.Errorf("without --present: exit %d, want 2 and %d bad input\n%s", code, left, out)
	}
	expectRefused(t, []string{"check", "--present", "--candidate", t.TempDir()}, []string{"--present:", "holds no candidate file for any of the"})
	expectRefused(t, []string{"check", "--present", "--candidate", filepath.Join(dir, "layer-paper.npz"), "layer-paper"}, []string{"--present judges the cases whose file a --candidate DIR holds"})
}
