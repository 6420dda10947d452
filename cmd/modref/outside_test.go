package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestBinaryOutsideCheckout builds the modref command and runs it as an
// installed one would run, from a directory outside the checkout: the
// corpus is the one built into it, and gen writes only where it is told.
func TestBinaryOutsideCheckout(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the binary cannot be built:", err)
	}
	bin := filepath.Join(t.TempDir(), "modref")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	good := writeCandidate(t, "layer-paper", nil)
	work := t.TempDir()
	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%q: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	names, err := format.List(corpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list"}, 0, "layer-paper "},
		{[]string{"explain", "layer-paper"}, 0, "Routed layer:"},
		{[]string{"check"}, 0, fmt.Sprintf("%d passed, 0 failed", len(names))},
		{[]string{"check", "--candidate", good, "layer-paper"}, 0, "1 passed, 0 failed"},
		{[]string{"check", "--corpus", filepath.Join(work, "none"), "layer-paper"}, 2, "none"},
		{[]string{"gen"}, 2, "pass --out DIR"},
	} {
		code, out, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%q from %s: exit %d, want %d and %q in the output:\n%s%s", tc.args, work, code, tc.code, tc.want, out, errOut)
		}
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Errorf("the commands left %d files in the directory they ran in", len(entries))
	}

	// gen --out writes the corpus modref carries, byte for byte.
	if code, out, errOut := run("gen", "--out", "cases"); code != 0 {
		t.Fatalf("gen --out cases: exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range names {
		for _, ext := range []string{".json", ".npz"} {
			want, err := os.ReadFile(filepath.Join(corpus, name+ext))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(work, "cases", name+ext))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("gen --out: %s%s differs from the committed corpus (%v)", name, ext, err)
			}
		}
	}
}

// TestGenFindsTheCheckout checks where gen writes without --out: golden/corpus
// of the modref module above the current directory, and nowhere in another
// module's tree.
func TestGenFindsTheCheckout(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "mod", "deep")
	for _, d := range []string{filepath.Join(root, "golden", "corpus"), sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gomod := filepath.Join(root, "go.mod")
	if err := os.WriteFile(gomod, []byte("module github.com/modref/modref\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if dir, err := checkoutCorpus(); err != nil || dir != filepath.Join(root, "golden", "corpus") {
		t.Errorf("in a modref checkout's subdirectory: %q, %v; want %s", dir, err, filepath.Join(root, "golden", "corpus"))
	}
	if err := os.WriteFile(gomod, []byte("module example.com/mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir, err := checkoutCorpus(); err == nil || !strings.Contains(err.Error(), "is not modref's") {
		t.Errorf("in another module: %q, %v; want a refusal", dir, err)
	}
}
