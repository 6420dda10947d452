package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestMLPLossFalls(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"mlp", "-steps", "100"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	var losses []float64
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		losses = append(losses, v)
	}
	if len(losses) < 2 || !(losses[len(losses)-1] < losses[0]/4) {
		t.Errorf("losses %v: want the last below a quarter of the first", losses)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"mlp", "-steps", "0"}, {"mlp", "-lr", "-1"}, {"mlp", "extra"}, {"mlp", "-bogus"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if errOut.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
}
