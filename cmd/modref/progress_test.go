package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestProgressLine(t *testing.T) {
	var buf bytes.Buffer
	p := drawProgress(&buf, "diagnose x: deviations recomputed")
	p(1, 3)
	p(2, 3)
	p(3, 3)
	if want := "\rdiagnose x: deviations recomputed 1/3\rdiagnose x: deviations recomputed 2/3\r\x1b[K"; buf.String() != want {
		t.Errorf("progress wrote %q, want %q", buf.String(), want)
	}
	if progressLine(&buf, "x") != nil {
		t.Error("progress on a buffer, want none")
	}
	f, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if progressLine(f, "x") != nil {
		t.Error("progress on a file, want none")
	}
}

// TestDiagnoseNoProgressOffTerminal checks that diagnose writes nothing to a
// stderr that is not a terminal when it succeeds.
func TestDiagnoseNoProgressOffTerminal(t *testing.T) {
	good := writeCandidate(t, "layer-paper", nil)
	code, out, errOut := runCmd("diagnose", "--corpus", corpus, "--candidate", good, "layer-paper")
	if code != 0 || errOut != "" || strings.Contains(out, "\r") {
		t.Errorf("exit %d, stderr %q, stdout has a carriage return: %v", code, errOut, strings.Contains(out, "\r"))
	}
}

// TestPhases: diagnose's second series of progress calls, from done 0 again,
// goes to the combinations' line.
func TestPhases(t *testing.T) {
	var single, combos [][2]int
	p := phases(func(d, n int) { single = append(single, [2]int{d, n}) }, func(d, n int) { combos = append(combos, [2]int{d, n}) })
	for _, c := range [][2]int{{0, 2}, {1, 2}, {2, 2}, {0, 1}, {1, 1}} {
		p(c[0], c[1])
	}
	if len(single) != 3 || len(combos) != 2 || combos[0] != [2]int{0, 1} {
		t.Errorf("single %v, combinations %v", single, combos)
	}
}
