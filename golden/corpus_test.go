package golden

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/mod/modcase"
)

// TestCorpusIsRegenerated checks that the committed corpus is exactly what
// the generator produces from the current ref, with the float32 tolerances
// gen sets (modcase.Float32Tolerances): manifests equal, every array the
// same shape, dtype and bits. Regenerate with `go run ./cmd/modref gen`.
func TestCorpusIsRegenerated(t *testing.T) {
	dir := filepath.Join("corpus")
	cases, err := Generate(modcase.Float32Tolerances)
	if err != nil {
		t.Fatal(err)
	}
	names, err := format.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(cases) {
		t.Errorf("corpus has %d cases, the generator makes %d", len(names), len(cases))
	}
	for _, want := range cases {
		name := want.Manifest.Name
		got, err := format.Load(dir, name)
		if err != nil {
			t.Errorf("%s: %v (regenerate with: go run ./cmd/modref gen)", name, err)
			continue
		}
		if diff := cmp.Diff(want.Manifest, got.Manifest); diff != "" {
			t.Errorf("%s: committed manifest differs from the generator's (-generated +committed):\n%s", name, diff)
		}
		sameBits(t, name, "generated", want, "committed", got)
	}
}

// sameBits fails t unless case b holds every array of case a with the same
// shape, dtype and bits; the messages call them what a and what b.
func sameBits(t *testing.T, name, whatA string, a *format.Case, whatB string, b *format.Case) {
	t.Helper()
	for an, aa := range a.Arrays {
		ba := b.Arrays[an]
		if ba == nil || !slices.Equal(aa.Shape, ba.Shape) || aa.DType != ba.DType {
			t.Errorf("%s: array %s missing or reshaped", name, an)
			continue
		}
		for k := range aa.F {
			if math.Float64bits(aa.F[k]) != math.Float64bits(ba.F[k]) {
				t.Errorf("%s: %s%v is %v %s, %v %s", name, an, aa.Index(k), aa.F[k], whatA, ba.F[k], whatB)
				break
			}
		}
		for k := range aa.I {
			if aa.I[k] != ba.I[k] {
				t.Errorf("%s: %s%v is %v %s, %v %s", name, an, aa.Index(k), aa.I[k], whatA, ba.I[k], whatB)
				break
			}
		}
	}
}

// TestEmbeddedCorpus checks that the corpus compiled into the package is
// the committed one, file for file and byte for byte.
func TestEmbeddedCorpus(t *testing.T) {
	entries, err := os.ReadDir("corpus")
	if err != nil {
		t.Fatal(err)
	}
	emb := Embedded()
	got, err := fs.ReadDir(embedded, "corpus")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Errorf("embedded corpus has %d files, corpus/ has %d", len(got), len(entries))
	}
	for _, e := range entries {
		want, err := os.ReadFile(filepath.Join("corpus", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		have, err := fs.ReadFile(embedded, "corpus/"+e.Name())
		if err != nil {
			t.Errorf("%s: not embedded: %v", e.Name(), err)
		} else if !bytes.Equal(have, want) {
			t.Errorf("%s: embedded bytes differ from corpus/", e.Name())
		}
	}
	names, err := emb.List()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emb.Load(names[0]); err != nil {
		t.Error(err)
	}
}

// TestUnknownCaseNamesNearOnes checks that a mistyped case name is an
// ErrUnknownCase error naming the cases it probably meant.
func TestUnknownCaseNamesNearOnes(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string // in the message
		not  []string
	}{
		{"layer-papr", []string{"did you mean layer-paper"}, nil},
		{"layer-causal", []string{"layer-causal-predictor", "layer-causal-router"}, []string{"layer-paper"}},
		{"ties", []string{"layer-ties"}, nil},
		{"transformer-xl", []string{"it holds"}, []string{"did you mean"}},
		{"../corpus/layer-paper", []string{"no such case"}, nil},
	} {
		_, err := Embedded().Load(tc.name)
		if !errors.Is(err, format.ErrUnknownCase) {
			t.Errorf("%q: error %v, want ErrUnknownCase", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q does not say %q", tc.name, err, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q says %q", tc.name, err, w)
			}
		}
	}
}

// TestSelect checks the case selection of modref list PATTERN...: globs and
// whole names, each case once and sorted, every pattern matching something.
func TestSelect(t *testing.T) {
	c := Embedded()
	all, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Select(); err != nil || !slices.Equal(got, all) {
		t.Errorf("no patterns: %d cases, %v; want all %d", len(got), err, len(all))
	}
	var decode []string
	for _, n := range all {
		if strings.HasPrefix(n, "decode-") {
			decode = append(decode, n)
		}
	}
	want := slices.Sorted(slices.Values(append([]string{"layer-paper"}, decode...)))
	if got, err := c.Select("layer-paper", "decode-*", "decode-padding"); err != nil || !slices.Equal(got, want) {
		t.Errorf("layer-paper decode-* decode-padding: %q, %v; want %q", got, err, want)
	}
	if _, err := c.Select("layer-*", "layer-papr"); !errors.Is(err, format.ErrUnknownCase) || !strings.Contains(err.Error(), "did you mean layer-paper") {
		t.Errorf("a pattern matching nothing: %v, want ErrUnknownCase naming layer-paper", err)
	}
	if _, err := c.Select("layer-["); err == nil || !strings.Contains(err.Error(), `pattern "layer-["`) {
		t.Errorf("a malformed pattern: %v, want its syntax error", err)
	}
}
