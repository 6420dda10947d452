package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// writeDeviant writes the candidate an implementation with the deviation
// would produce for a case and returns its path.
func writeDeviant(t *testing.T, name, deviation string) string {
	t.Helper()
	c, err := format.Load(corpus, name)
	if err != nil {
		t.Fatal(err)
	}
	cand, err := diagnose.DeviantCandidate(c, deviation, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".npz")
	if err := format.WriteNPZ(path, cand); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiagnoseNamesTheDeviation(t *testing.T) {
	before := corpusDigest(t)
	path := writeDeviant(t, "layer-paper", "no_weighting")
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", path, "layer-paper")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[1], "oracle: does not match") {
		t.Errorf("the second line is %q, want the oracle's verdict", lines[1])
	}
	// The table's columns are as wide as its longest name: compare with
	// every run of spaces squashed to one.
	squashed := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"no_weighting MATCHES 18/18",
		"residual_twice does not match",
		"ste_m_plus_1 not emulated",
		// int(0.5·8) = 4 is the robust floor too: no difference to show.
		"capacity_floor_zero same as oracle",
		"verdict: the candidate does not match the oracle; it matches no_weighting\n",
	} {
		if strings.HasSuffix(want, "\n") {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			continue
		}
		if !strings.Contains(squashed, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The case may come first, and a directory stands for DIR/CASE.npz.
	if code, out, _ := runCmd("diagnose", "layer-paper", "-dir", corpus, "--candidate", filepath.Dir(path)); code != 1 || !strings.Contains(out, "it matches no_weighting") {
		t.Errorf("case first, candidate directory: exit %d\n%s", code, out)
	}
	if corpusDigest(t) != before {
		t.Error("diagnose changed the corpus")
	}
}

func TestDiagnoseCorrectCandidate(t *testing.T) {
	good := writeCandidate(t, "layer-none", nil)
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", good, "layer-none")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"oracle: matches (18/18", "cannot tell it from the oracle",
		"verdict: the candidate matches the oracle (on this case it cannot be told from residual_scaled, no_weighting, weight_mlp_only, capacity_floor_zero, aux_over_padding)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDiagnoseNoMatch(t *testing.T) {
	bad := writeCandidate(t, "decode-router", func(m map[string]*format.Array) { m["decode_logits"].F[7] += 1 })
	code, out, _ := runCmd("diagnose", "-dir", corpus, "--candidate", bad, "decode-router")
	if code != 1 || !strings.Contains(out, "verdict: the candidate matches neither the oracle nor any emulated deviation, and no known deviation explains it\n") ||
		!strings.Contains(out, "arrays furthest from the oracle (error over tolerance):\n  decode_logits: max abs 1.00e+00 at [0 0 7]") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

// TestDiagnoseWeakLead: a deviation whose effect the candidate shows on
// every array it moves is named present, whatever else is broken
// (diagnose.Explain); one that moves an array the candidate has right (the
// oracle's out, here) is not, and is named as the closest only when it
// explains at least half of the case's arrays; below that the verdict says
// none explains the candidate and lists the arrays furthest from the oracle.
func TestDiagnoseWeakLead(t *testing.T) {
	c, err := format.Load(corpus, "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := diagnose.DeviantCandidate(c, "no_weighting", "")
	if err != nil {
		t.Fatal(err)
	}
	grads := []string{"grad.input.x", "grad.param.Norm1", "grad.param.Wq", "grad.param.Wk", "grad.param.Wv",
		"grad.param.Wo", "grad.param.Norm2", "grad.param.W1", "grad.param.W2", "grad.param.Router"}
	present := "present: no_weighting; and besides them, the candidate first departs at gradients (grad.param.Norm1)"
	for _, tc := range []struct {
		broken    int
		oracleOut bool
		want      string
	}{
		{4, false, present},
		{10, false, present},
		{4, true, "closest is no_weighting (13/18 arrays)"},
		{10, true, "no known deviation explains it"},
	} {
		cand := make(map[string]*format.Array)
		for n, a := range dev {
			cand[n] = a
		}
		if tc.oracleOut {
			cand["out"] = c.Arrays["expected.out"]
		}
		for _, n := range grads[:tc.broken] {
			b := *cand[n]
			b.F = make([]float64, len(b.F))
			for k := range b.F {
				b.F[k] = 100
			}
			cand[n] = &b
		}
		path := filepath.Join(t.TempDir(), "layer-paper.npz")
		if err := format.WriteNPZ(path, cand); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runCmd("diagnose", "-dir", corpus, "--candidate", path, "layer-paper")
		if code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("%d gradients broken (the oracle's out: %t): exit %d, output lacks %q:\n%s", tc.broken, tc.oracleOut, code, tc.want, out)
		}
	}
}

func TestDiagnoseBadInput(t *testing.T) {
	dir, good, corrupt, nan, missing := badCandidates(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--candidate", filepath.Join(dir, "nope.npz"), "layer-paper"}, []string{"nope.npz"}},
		{[]string{"--candidate", corrupt, "layer-paper"}, []string{"corrupt.npz", "not a readable .npz"}},
		{[]string{"--candidate", nan, "layer-paper"}, []string{`"out"`, "NaN", "[0 0 3]"}},
		{[]string{"--candidate", missing, "layer-paper"}, []string{`"router_logits" is missing`}},
		{[]string{"--candidate", good, "no-such-case"}, []string{`no such case "no-such-case"`}},
		{[]string{"--candidate", good, "layer-causal"}, []string{"did you mean layer-causal-predictor, layer-causal-router, layer-causal-threshold?"}},
		{[]string{"--candidate", good}, []string{"usage: modref diagnose"}},
		{[]string{"layer-paper"}, []string{"usage: modref diagnose"}},
		{[]string{"--candidate", good, "layer-paper", "layer-none"}, []string{"usage: modref diagnose"}},
		{[]string{"--bogus"}, nil},
	} {
		code, out, errOut := runCmd(append([]string{"diagnose", "-dir", corpus}, c.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errOut)
		}
		if out != "" {
			t.Errorf("%v: output on stdout %q", c.args, out)
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
}

// TestDiagnoseNamesCombination: a candidate with two deviations at once is
// named by the combination, with both descriptions.
func TestDiagnoseNamesCombination(t *testing.T) {
	path := writeDeviant(t, "layer-paper", "residual_twice+unsorted_indices")
	code, out, errOut := runCmd("diagnose", "-dir", corpus, "--candidate", path, "layer-paper")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"verdict: the candidate does not match the oracle; it matches residual_twice+unsorted_indices\n",
		"  residual_twice+unsorted_indices: residual counted twice: out = x + g·(x + f), the block returned its own residual; and indices not sorted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestDiagnoseNoneExplains: a layer candidate whose out is off at one
// element, and right everywhere else, matches no deviation and no
// combination; the verdict says so and lists the array, the index, the two
// values and the error over tolerance.
func TestDiagnoseNoneExplains(t *testing.T) {
	bad := writeCandidate(t, "layer-paper", func(m map[string]*format.Array) { m["out"].F[13] += 0.5 })
	code, out, _ := runCmd("diagnose", "-dir", corpus, "--candidate", bad, "layer-paper")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"verdict: the candidate matches neither the oracle nor any emulated deviation, and no known deviation explains it\n",
		"arrays furthest from the oracle (error over tolerance):\n  out: max abs 5.00e-01 at [0 1 5] (got ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MATCHES") {
		t.Errorf("a deviation or combination matches:\n%s", out)
	}
}

// TestDiagnoseIndistinguishable: when two deviations match, the verdict
// names both and says the case cannot tell them apart
// (capacity_off_by_one and capacity_floor_zero on layer-capacity-floor,
// where 0.29·100 floors to 28 either way).
func TestDiagnoseIndistinguishable(t *testing.T) {
	results := []diagnose.DeviationResult{
		{Name: diagnose.OracleName, Emulated: true, Matching: 3, Total: 18},
		{Name: "capacity_off_by_one", Emulated: true, Distinct: true, Match: true, Matching: 18, Total: 18},
		{Name: "capacity_floor_zero", Emulated: true, Distinct: true, Match: true, Matching: 18, Total: 18},
	}
	var b strings.Builder
	printDiagnosis(&b, "layer-capacity-floor", "c.npz", results, &judge.CaseResult{}, nil, nil, nil)
	want := "verdict: the candidate does not match the oracle; it matches capacity_off_by_one, capacity_floor_zero (this case cannot tell them apart)\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

// TestDiagnoseSummarisesPositions: a stage wrong at all 29 selected
// tokens of each row of layer-capacity-floor (S = 100) is reported with
// each row's positions summarised (runs, the first few, count and range),
// not listed one by one, and with the selected tokens counted.
func TestDiagnoseSummarisesPositions(t *testing.T) {
	c, err := format.Load(corpus, "layer-capacity-floor")
	if err != nil {
		t.Fatal(err)
	}
	sel := c.Arrays["expected.selected"]
	cand := writeCandidate(t, "layer-capacity-floor", func(m map[string]*format.Array) {
		o := m["out"]
		f := slices.Clone(o.F)
		s, d := o.Shape[1], o.Shape[2]
		for b := range sel.Shape[0] {
			for _, i := range sel.I[b*sel.Shape[1] : (b+1)*sel.Shape[1]] {
				for j := range d {
					f[(b*s+int(i))*d+j] += 1
				}
			}
		}
		m["out"] = format.Float(f, o.Shape...)
	})
	code, out, errOut := runBin(t, "diagnose", "--corpus", absCorpus(t), "--candidate", cand, "layer-capacity-floor")
	stage := regexp.MustCompile(`(?m)^where it first departs.*$`).FindString(out)
	if code != 1 || !strings.Contains(stage, "output (out): wrong in row 0 at [") || strings.Count(stage, "(29 positions in ") != 2 ||
		!strings.Contains(stage, "(58 of 58 selected tokens, 0 of 142 others): at every selected token, and only there") {
		t.Fatalf("diagnose: exit %d, stage %q\n%s%s", code, stage, out, errOut)
	}
	for _, list := range regexp.MustCompile(`\[[^\]]*\]`).FindAllString(stage, -1) {
		if n := len(strings.Fields(list)); n > 9 {
			t.Errorf("a list of %d entries in the stage line: %s", n, list)
		}
	}
}

// TestDiagnoseNamesPresentBesidesAnUnnamedBug: sramshetty/mixture-of-depths'
// block (residual_twice+weight_mlp_only) with a router whose parameters
// get no gradient (an unnamed bug) matches nothing; the verdict names the
// two present and says where the candidate first departs besides them,
// the router's gradient, and --json carries the same.
func TestDiagnoseNamesPresentBesidesAnUnnamedBug(t *testing.T) {
	c, err := format.Load(corpus, "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	cand, err := diagnose.DeviantCandidate(c, "residual_twice+weight_mlp_only", "")
	if err != nil {
		t.Fatal(err)
	}
	r := cand["grad.param.Router"]
	cand["grad.param.Router"] = &format.Array{Shape: r.Shape, DType: r.DType, F: make([]float64, len(r.F))}
	path := filepath.Join(t.TempDir(), "layer-paper.npz")
	if err := format.WriteNPZ(path, cand); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd("diagnose", "-dir", corpus, "--candidate", path, "layer-paper")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"verdict: the candidate matches neither the oracle nor any emulated deviation; present: residual_twice, weight_mlp_only; and besides them, the candidate first departs at gradients (grad.param.Router)\n",
		"where it first departs from the oracle with residual_twice, weight_mlp_only applied, in the order the layers compute: gradients (grad.param.Router)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, js, _ := runCmd("diagnose", "-dir", corpus, "--json", "--candidate", path, "layer-paper")
	if code != 1 || !regexp.MustCompile(`"partial": \{\s*"present": \[\s*"residual_twice",\s*"weight_mlp_only"\s*\]`).MatchString(js) {
		t.Errorf("--json: exit %d, want 1 and partial.present [residual_twice weight_mlp_only]\n%s", code, js)
	}
}
