package format

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestLoadJudged checks, on every case of the committed corpus, that
// LoadJudged keeps exactly Load's expected and integer arrays, the same
// values, and leaves out every other array.
func TestLoadJudged(t *testing.T) {
	corpus := Dir("../corpus")
	names, err := corpus.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		full, err := corpus.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		judged, err := corpus.LoadJudged(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, info := range full.Manifest.Arrays {
			got, kept := judged.Arrays[info.Name]
			switch want := info.Role == RoleExpected || info.DType == "<i8"; {
			case want && !reflect.DeepEqual(got, full.Arrays[info.Name]):
				t.Errorf("%s: array %q differs from Load's", name, info.Name)
			case !want && kept:
				t.Errorf("%s: array %q (%s, %s) is kept", name, info.Name, info.Role, info.DType)
			}
		}
	}
}

// TestLoadJudgedRefusesNonFinite checks that an array LoadJudged leaves
// out is still checked: a case whose float input holds a NaN or an
// infinity far from its start is refused by LoadJudged, naming the array,
// the value and where, as Load refuses it.
func TestLoadJudgedRefusesNonFinite(t *testing.T) {
	c, err := Dir("../corpus").Load("layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	var input string
	for _, info := range c.Manifest.Arrays {
		if info.Role != RoleExpected && info.DType == "<f8" && len(c.Arrays[info.Name].F) > 1 && (input == "" || len(c.Arrays[info.Name].F) > len(c.Arrays[input].F)) {
			input = info.Name
		}
	}
	if input == "" {
		t.Fatal("layer-paper has no float input array")
	}
	for _, bad := range []float64{math.NaN(), math.Inf(-1)} {
		dir := t.TempDir()
		a := c.Arrays[input]
		k := len(a.F) - 1
		old := a.F[k]
		a.F[k] = bad
		files, err := c.Files()
		a.F[k] = old
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for what, load := range map[string]func(string) (*Case, error){"Load": Dir(dir).Load, "LoadJudged": Dir(dir).LoadJudged} {
			_, err := load("layer-paper")
			if err == nil || !strings.Contains(err.Error(), input) || !strings.Contains(err.Error(), fmt.Sprint("holds ", bad)) {
				t.Errorf("%s of a case whose %s holds %v at its last element: err = %v", what, input, bad, err)
			}
		}
	}
}
