package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFuzzSummaryShowsWhatIsNotDefault: a failure found with grouped-query
// attention pinned (4 query heads sharing 2 key and value heads) is shrunk,
// and the summary's "to" line still shows kv_heads=2 and the block's other
// choices that are not their defaults.
func TestFuzzSummaryShowsWhatIsNotDefault(t *testing.T) {
	skipRaceShort(t, "modrefBin fuzzes and shrinks the fake candidate on 20 cases (59 s at a load of 25-30)")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.json")
	os.WriteFile(base, []byte(`{"kind": "layer", "config": {"layer": {"heads": 4, "kv_heads": 2, "mlp": "swiglu", "rope_base": 500000}}}`), 0o644)
	code, out, stderr := runBin(t, "fuzz", "--exec", fakeExec("long", true), "--config-base", base, "--max-seq", "24", "--cases", "20", "--shrink-tries", "40", "--out", filepath.Join(dir, "repro"))
	m := regexp.MustCompile(`(?m)^ +shrunk from (layer .*)\n +to (layer .*) \(\d+ steps kept`).FindStringSubmatch(out)
	if code != 1 || m == nil {
		t.Fatalf("exit %d, no shrunk failure in\n%s%s", code, out, stderr)
	}
	for _, want := range []string{" heads=4 ", " kv_heads=2", " mlp=swiglu", " rope_base=500000", " capacity="} {
		if !strings.Contains(m[1], want) || !strings.Contains(m[2], want) {
			t.Errorf("sizes before %q and after shrinking %q, want both to show %q", m[1], m[2], want)
		}
	}
	t.Logf("shrunk from %s\n to %s", m[1], m[2])
}
