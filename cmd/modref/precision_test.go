package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/mod/modcase"
)

// TestCheckPrecision runs check under each profile on modref's own float32
// implementation: it passes float32 and every lower precision on the whole
// corpus, fails float64 (its float32 round-off is far above float64's),
// and the JSON carries the profile and its measurements.
func TestCheckPrecision(t *testing.T) {
	for _, p := range []string{"float32", "tf32", "bf16", "fp16"} {
		if code, out, errOut := runCmd("check", "-dir", corpus, "--precision", p); code != 0 || !strings.Contains(out, "precision "+p+": ") {
			t.Errorf("--precision %s: exit %d\n%s%s", p, code, out, errOut)
		}
	}
	if code, out, _ := runCmd("check", "-dir", corpus, "--precision", "float64", "layer-paper"); code != 1 {
		t.Errorf("float32 under --precision float64: exit %d, want 1\n%s", code, out)
	}
	code, out, errOut := runCmd("check", "-dir", corpus, "--precision", "bf16", "--json", "layer-paper")
	var res []judge.CaseResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res) != 1 {
		t.Fatalf("--json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if r := res[0]; r.Precision != "bf16" || r.Baseline == nil || len(r.Baseline.Arrays) == 0 || r.Baseline.Margin <= oracle.RoutingMargin {
		t.Errorf("--json: precision %q, baseline %+v", r.Precision, r.Baseline)
	}
}

// TestPrecisionCatches: a deviation moves values far beyond the bf16
// tolerance on layer-paper: check fails it, saying what the bf16 profile
// does not cover (larger products accumulated in bf16), and diagnose
// names it.
func TestPrecisionCatches(t *testing.T) {
	path := writeDeviant(t, "layer-paper", "no_weighting")
	if code, out, _ := runCmd("check", "-dir", corpus, "--precision", "bf16", "--candidate", path, "layer-paper"); code != 1 || !strings.Contains(out, "it does not cover bf16 accumulation of larger products") {
		t.Errorf("no_weighting under bf16: exit %d, want 1 and a note of what the profile does not cover\n%s", code, out)
	}
	if _, out, _ := runCmd("check", "-dir", corpus, "--precision", "fp16", "--candidate", path, "layer-paper"); strings.Contains(out, "accumulation of larger products") {
		t.Errorf("no_weighting under fp16: a note of the bf16 profile\n%s", out)
	}
	code, out, _ := runCmd("diagnose", "-dir", corpus, "--precision", "bf16", "--candidate", path, "layer-paper")
	if code != 1 || !strings.Contains(out, "it matches no_weighting") || !strings.HasPrefix(out, "precision bf16: ") {
		t.Errorf("diagnose under bf16: exit %d\n%s", code, out)
	}
}

func TestPrecisionBadFlag(t *testing.T) {
	for _, cmd := range []string{"check", "diagnose"} {
		for _, v := range []string{"bfloat16", ""} {
			args := []string{cmd, "-dir", corpus, "--precision", v, "--candidate", "x.npz", "layer-paper"}
			code, _, errOut := runCmd(args...)
			if code != 2 || !strings.Contains(errOut, "precision") {
				t.Errorf("%s --precision %q: exit %d, stderr %q", cmd, v, code, errOut)
			}
		}
	}
}

// paperConfig returns gen --print-config layer-paper, decoded and as
// printed.
func paperConfig(t *testing.T) (map[string]any, string) {
	t.Helper()
	return printedConfig(t, "layer-paper")
}

// writeBF16Emulation writes the bf16 profile's emulated implementation of
// case c as a candidate file, its bf16 values written exactly as float64,
// and returns the file's path.
func writeBF16Emulation(t *testing.T, c *format.Case) string {
	t.Helper()
	p, _ := format.ParseProfile("bf16")
	cand, err := modcase.Emulate(c, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cand {
		if a.F != nil {
			a.DType = "<f8"
		}
	}
	path := filepath.Join(t.TempDir(), "bf16.npz")
	if err := format.WriteNPZ(path, cand); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGenConfigPrecision: a configuration's precision lands in the
// generated manifest, and check judges the case under it unless
// --precision says otherwise; a bad one is refused naming it.
func TestGenConfigPrecision(t *testing.T) {
	g, out := paperConfig(t)
	if _, ok := g["precision"]; ok {
		t.Errorf("a corpus case's configuration has a precision: %s", out)
	}
	g["name"], g["precision"] = "paper-bf16", "bf16"
	work := t.TempDir()
	raw, _ := json.Marshal(g)
	file := writeFile(t, work, "bf16.json", raw)
	if code, out, errOut := runBin(t, "gen", "--config", file, "--out", work); code != 0 {
		t.Fatalf("gen --config: exit %d\n%s%s", code, out, errOut)
	}
	m, _ := os.ReadFile(filepath.Join(work, "paper-bf16.json"))
	if !strings.Contains(string(m), `"precision": "bf16"`) {
		t.Errorf("the manifest lacks the precision:\n%s", m)
	}
	code, out, errOut := runBin(t, "check", "--corpus", work, "paper-bf16")
	if code != 0 || !strings.Contains(out, "paper-bf16 [bf16]") {
		t.Errorf("check of the bf16 case: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runBin(t, "check", "--corpus", work, "--precision", "float64", "paper-bf16")
	if code != 1 || strings.Contains(out, "[bf16]") {
		t.Errorf("--precision float64 over the manifest's bf16: exit %d\n%s", code, out)
	}
	g["precision"] = "bfloat16"
	raw, _ = json.Marshal(g)
	writeFile(t, work, "bad.json", raw)
	expectRefused(t, []string{"gen", "--config", filepath.Join(work, "bad.json"), "--out", work}, []string{`precision "bfloat16"`}, work)
}

// TestFlipReport: on layer-ties-bf16 a correct bf16 implementation (the
// bf16 emulation) breaks rounding ties by the lower position, against the
// float64 truth: check --precision bf16 passes it with a flip report, and
// diagnose says it matches at its own decisions; without the profile the
// float32 margin does not cover the bf16 error and the case fails.
func TestFlipReport(t *testing.T) {
	c, err := format.Load(corpus, "layer-ties-bf16")
	if err != nil {
		t.Fatal(err)
	}
	path := writeBF16Emulation(t, c)
	code, out, errOut := runCmd("check", "-dir", corpus, "--precision", "bf16", "--candidate", path, "layer-ties-bf16")
	if code != 0 || !strings.Contains(out, "4 routing decisions flipped, each within the near-tie margin") ||
		!strings.Contains(out, "row 0: routed only by the candidate [2], only by the truth [3]; furthest 0.0001 from the boundary, within the margin") {
		t.Errorf("check --precision bf16: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCmd("diagnose", "-dir", corpus, "--precision", "bf16", "--candidate", path, "layer-ties-bf16")
	if code != 0 || !strings.Contains(out, "oracle: matches at the candidate's own routing decisions") {
		t.Errorf("diagnose --precision bf16: exit %d\n%s", code, out)
	}
	if code, out, _ := runCmd("check", "-dir", corpus, "--candidate", path, "layer-ties-bf16"); code != 1 {
		t.Errorf("check without a profile: exit %d, want 1\n%s", code, out)
	}
}

// TestGenConfigBF16Ties: "ties": "bf16" in a configuration generates a
// case whose ties only bf16 sees (gaps of 1e-4), on which a correct bf16
// implementation flips and is judged at its own decisions; "ties" on a case
// that cannot have them is refused naming the field.
func TestGenConfigBF16Ties(t *testing.T) {
	g, _ := paperConfig(t)
	g["name"], g["ties"] = "my-ties", "bf16"
	work := t.TempDir()
	raw, _ := json.Marshal(g)
	file := writeFile(t, work, "ties.json", raw)
	if code, out, errOut := runBin(t, "gen", "--config", file, "--out", work); code != 0 {
		t.Fatalf("gen --config: exit %d\n%s%s", code, out, errOut)
	}
	c, err := format.Load(work, "my-ties")
	if err != nil {
		t.Fatal(err)
	}
	for _, gap := range c.Manifest.Routing.Gaps[0] {
		if !c.Manifest.Routing.Ties || gap < 0.9e-4 || gap > 1.1e-4 {
			t.Errorf("routing %+v, want ties and gaps of 1e-4", c.Manifest.Routing)
		}
	}
	path := writeBF16Emulation(t, c)
	code, out, errOut := runCmd("check", "-dir", work, "--precision", "bf16", "--candidate", path, "my-ties")
	if code != 0 || !strings.Contains(out, "routing decisions flipped, each within the near-tie margin") {
		t.Errorf("check --precision bf16: exit %d\n%s%s", code, out, errOut)
	}
	g["ties"] = "loose"
	raw, _ = json.Marshal(g)
	writeFile(t, work, "bad.json", raw)
	expectRefused(t, []string{"gen", "--config", filepath.Join(work, "bad.json"), "--out", work}, []string{`ties = "loose"`}, work)
}
