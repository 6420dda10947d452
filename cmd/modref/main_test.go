package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

// TestJSONErrors: with --json, an error before any result (a usage error,
// a corpus that cannot be read, an unknown case) is a JSON object on stdout
// with the message and exit status 2, beside the message on stderr; an
// error after the results (a bad candidate) adds nothing to the JSON
// already printed.
func TestJSONErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--json", "--candidate", ""}, "--candidate is empty"},
		{[]string{"check", "--json", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"check", "--json", "--corpus", "/nonexistent/corpus"}, "/nonexistent/corpus"},
		{[]string{"check", "--json", "no-such-case"}, "no-such-case"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		var got jsonError
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != 2 || got.ExitStatus != 2 {
			t.Errorf("%q: exit %d, stdout %q (%v); want 2 and a JSON error object", c.args, code, out.String(), err)
			continue
		}
		if !strings.Contains(got.Error, c.want) || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: JSON error %q, stderr %q; want both to say %q", c.args, got.Error, errOut.String(), c.want)
		}
	}
	// A bad candidate file is its case's error in the results, exit 2, and
	// stdout stays one JSON document.
	bad := filepath.Join(t.TempDir(), "layer-paper.npz")
	os.WriteFile(bad, []byte("not an archive"), 0o644)
	var out, errOut bytes.Buffer
	code := run([]string{"check", "--json", "--corpus", corpus, "--candidate", bad, "layer-paper"}, &out, &errOut)
	var results []map[string]any
	if err := json.Unmarshal(out.Bytes(), &results); code != 2 || err != nil || len(results) != 1 || results[0]["error"] == nil {
		t.Errorf("bad candidate: exit %d, stdout %q (%v); want 2 and one JSON array of one result with its error", code, out.String(), err)
	}
}
