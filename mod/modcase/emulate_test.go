package modcase

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/lowp"
)

func load(t *testing.T, name string) *format.Case {
	t.Helper()
	c, err := format.Load("../../golden/corpus", name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// worstError is the largest |baseline − expected| over a case's float
// arrays.
func worstError(c *format.Case, base map[string]*format.Array) float64 {
	worst := 0.0
	for _, info := range c.Manifest.Arrays {
		b, ok := base[format.CandidateName(info.Name)]
		if info.Role != format.RoleExpected || !ok || b.F == nil {
			continue
		}
		for k, e := range c.Arrays[info.Name].F {
			worst = math.Max(worst, math.Abs(b.F[k]-e))
		}
	}
	return worst
}

// TestEmulate checks what each profile's emulation is: float64 is ref
// (exact on the corpus), float32 is mod's own candidate bit for bit (at
// layer-paper's eight positions its float32 rotary angles give the same
// tables as mod's float64 ones; TestEmulateFloat32Angles is where they
// differ), and the
// low-precision ones err more the coarser the format, bf16 and fp16 writing
// values of their format.
func TestEmulate(t *testing.T) {
	c := load(t, "layer-paper")
	errs := map[string]float64{}
	for _, p := range format.Profiles {
		base, err := Emulate(c, p)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		errs[p.Name] = worstError(c, base)
		if p.Storage != nil {
			for name, a := range base {
				for _, v := range a.F {
					if p.Storage.Round(v) != v {
						t.Fatalf("%s: %s holds %v, not a %s value", p.Name, name, v, p.Storage.Name)
					}
				}
			}
		}
		if p.Name == "float32" {
			own, err := Candidate(c)
			if err != nil {
				t.Fatal(err)
			}
			for name, a := range own {
				if !slices.Equal(a.F, base[name].F) || !slices.Equal(a.I, base[name].I) {
					t.Errorf("float32: %s differs from mod's candidate", name)
				}
			}
		}
	}
	t.Logf("largest errors: %v", errs)
	if errs["float64"] != 0 {
		t.Errorf("float64 (ref) errs by %g on the corpus, want 0", errs["float64"])
	}
	// Each step down in precision errs more, by roughly its unit.
	for _, s := range []struct{ lo, hi string }{{"float64", "float32"}, {"float32", "tf32"}, {"tf32", "bf16"}, {"fp16", "bf16"}} {
		if !(errs[s.lo] < errs[s.hi]) {
			t.Errorf("%s errs by %g, %s by %g: want the second larger", s.lo, errs[s.lo], s.hi, errs[s.hi])
		}
	}
	if u := lowp.BF16.Epsilon(); errs["bf16"] < u || errs["bf16"] > 100*u*8 {
		t.Errorf("bf16 errs by %g, outside [u, 800u] (u = %g)", errs["bf16"], u)
	}
}

// TestEmulateRoundsInputs: the bf16 emulation reads the case's inputs and
// parameters rounded, so a case whose inputs are already bf16 values gives
// the same arrays as the case itself.
func TestEmulateRoundsInputs(t *testing.T) {
	c := load(t, "layer-paper")
	p, _ := format.ParseProfile("bf16")
	a, err := Emulate(c, p)
	if err != nil {
		t.Fatal(err)
	}
	rounded := &format.Case{Manifest: c.Manifest, Arrays: map[string]*format.Array{}}
	for name, x := range c.Arrays {
		y := *x
		if !strings.HasPrefix(name, "expected.") && !strings.HasPrefix(name, "grad.") && x.F != nil {
			y.F = slices.Clone(x.F)
			lowp.BF16.RoundAll(y.F)
		}
		rounded.Arrays[name] = &y
	}
	b, err := Emulate(rounded, p)
	if err != nil {
		t.Fatal(err)
	}
	for name := range a {
		if !slices.Equal(a[name].F, b[name].F) {
			t.Errorf("%s differs between the case and its bf16-rounded inputs", name)
		}
	}
}
