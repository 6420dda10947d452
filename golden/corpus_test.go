package golden

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCorpusIsRegenerated checks that the committed corpus is exactly what
// the generator produces from the current ref: manifests equal, every array
// the same shape, dtype and bits. Regenerate with `go run ./cmd/modref gen`.
func TestCorpusIsRegenerated(t *testing.T) {
	dir := filepath.Join("corpus")
	cases, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	names, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(cases) {
		t.Errorf("corpus has %d cases, the generator makes %d", len(names), len(cases))
	}
	for _, want := range cases {
		name := want.Manifest.Name
		got, err := Load(dir, name)
		if err != nil {
			t.Errorf("%s: %v (regenerate with: go run ./cmd/modref gen)", name, err)
			continue
		}
		if diff := cmp.Diff(want.Manifest, got.Manifest); diff != "" {
			t.Errorf("%s: committed manifest differs from the generator's (-generated +committed):\n%s", name, diff)
		}
		for an, wa := range want.Arrays {
			ga := got.Arrays[an]
			if ga == nil || !slices.Equal(wa.Shape, ga.Shape) || wa.DType != ga.DType {
				t.Errorf("%s: array %s missing or reshaped", name, an)
				continue
			}
			for k := range wa.F {
				if math.Float64bits(wa.F[k]) != math.Float64bits(ga.F[k]) {
					t.Errorf("%s: %s%v is %v committed, %v generated", name, an, wa.Index(k), ga.F[k], wa.F[k])
					break
				}
			}
			for k := range wa.I {
				if wa.I[k] != ga.I[k] {
					t.Errorf("%s: %s%v is %v committed, %v generated", name, an, wa.Index(k), ga.I[k], wa.I[k])
					break
				}
			}
		}
	}
}
