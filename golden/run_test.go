package golden

import (
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

// TestRefReproducesEveryCase recomputes every case from its stored inputs and
// parameters and requires ref's values to pass with zero tolerance: the
// corpus files and the generator agree about every array's meaning.
func TestRefReproducesEveryCase(t *testing.T) {
	names, err := format.List("corpus")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		c := loadCase(t, name)
		cand, err := oracle.RefCandidate(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range c.Manifest.Arrays {
			if info.Role != format.RoleExpected {
				continue
			}
			got, want := cand[format.CandidateName(info.Name)], c.Arrays[info.Name]
			for k := range want.F {
				if got.F[k] != want.F[k] {
					t.Errorf("%s: %s%v recomputed as %v, stored %v", name, info.Name, want.Index(k), got.F[k], want.F[k])
					break
				}
			}
			for k := range want.I {
				if got.I[k] != want.I[k] {
					t.Errorf("%s: %s%v recomputed as %v, stored %v", name, info.Name, want.Index(k), got.I[k], want.I[k])
					break
				}
			}
		}
	}
}

// loadCase reads a case of the embedded corpus (the committed one).
func loadCase(t *testing.T, name string) *format.Case {
	t.Helper()
	c, err := Embedded().Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
