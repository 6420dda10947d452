package modcase

import (
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
)

// TestFloat32Tolerances checks what gen does to a case's manifest: every
// tolerance at least the constant's (oracle.ToleranceFor), rtol kept, an
// atol above the constant only with a reason that says so, and
// layer-layernorm-swiglu's loss, whose float32 sum errs by more than the
// constant allows, widened.
func TestFloat32Tolerances(t *testing.T) {
	c := load(t, "layer-layernorm-swiglu")
	for i, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			c.Manifest.Arrays[i].Tolerance = oracle.ToleranceFor(info.Name, c.Arrays[info.Name])
		}
	}
	if err := Float32Tolerances(c); err != nil {
		t.Fatal(err)
	}
	widened := 0
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		old, got := oracle.ToleranceFor(info.Name, c.Arrays[info.Name]), info.Tolerance
		switch {
		case got.RTol != old.RTol || got.ATol < old.ATol:
			t.Errorf("%s: tolerance %+v, tighter than or other than the constant %+v", info.Name, *got, *old)
		case got.ATol > old.ATol && !strings.Contains(got.Reason, "Widened on this case"):
			t.Errorf("%s: atol widened from %g to %g without saying so: %q", info.Name, old.ATol, got.ATol, got.Reason)
		case got.ATol > old.ATol:
			widened++
			t.Logf("%s: %s", info.Name, got.Reason)
		}
	}
	if tol := c.Manifest.Arrays[indexOf(c, "expected.loss")].Tolerance; !strings.Contains(tol.Reason, "Widened") {
		t.Errorf("loss: %+v, want widened by the family's float32 sums", *tol)
	}
	if widened > 3 {
		t.Errorf("%d arrays widened, want the loss alone or few", widened)
	}
}

// TestFloat32TolerancesFullyPadded checks a case whose only row is all
// padding (valid length 0, as fuzz draws): every value judged is none, the
// arrays are 0, and every tolerance must still be a finite number (a
// relative error of 0/0 once made the losses' atol NaN, which the case's
// own check then refused).
func TestFloat32TolerancesFullyPadded(t *testing.T) {
	layer := `"d_model": 8, "heads": 4, "d_ff": 10, "norm": "layernorm", "norm_eps": 1e-5, "mlp": "gelu",
		"positions": "rope", "rope_base": 10000, "router": "linear", "capacity": {"kind": "ratio", "ratio": 0.5},
		"weighting": "sigmoid", "compute": "gather", "aux": "router_bce", "aux_weight": 0.01, "causal": "off"`
	g, err := golden.DecodeGenConfig([]byte(`{"name": "padded", "kind": "layer", "seed": 1,
		"config": {"batch": 1, "seq_len": 4, "valid_lengths": [0], "layer": {` + layer + `}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := golden.GenerateUnmeasured(g, Float32Tolerances)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range c.Manifest.Arrays {
		if tol := info.Tolerance; tol != nil && (math.IsNaN(tol.ATol) || math.IsInf(tol.ATol, 0) || tol.ATol < 0) {
			t.Errorf("%s: atol %v: %s", info.Name, tol.ATol, tol.Reason)
		}
	}
	if _, err := judge.Compare(c, c.Candidate(), false); err != nil {
		t.Errorf("the truth judged against itself: %v", err)
	}
}

// TestProfileTolerancesIsThePortableFamily checks that ProfileTolerances,
// which measures the family a member at a time, gives every array the
// tolerance, and the routing the margin, that judge.Tolerances gives from
// the whole of PortableFamily, bit for bit, under the profiles whose
// families differ in kind: bf16 (rounded products and the random-rounding
// draws), tf32, and float64 (ref and the scaled float32 family).
func TestProfileTolerancesIsThePortableFamily(t *testing.T) {
	for _, name := range []string{"layer-layernorm-swiglu", "model-every-other"} {
		for _, pn := range []string{"bf16", "tf32", "float64"} {
			c := load(t, name)
			p, err := format.ParseProfile(pn)
			if err != nil {
				t.Fatal(err)
			}
			got, rep, err := ProfileTolerances(c, p)
			if err != nil {
				t.Fatal(err)
			}
			fam, err := PortableFamily(c, p)
			if err != nil {
				t.Fatal(err)
			}
			want, wantRep, err := judge.Tolerances(p, c, FamilyArrays(fam)...)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Margin != wantRep.Margin {
				t.Errorf("%s under %s: margin %v, want %v", name, pn, rep.Margin, wantRep.Margin)
			}
			for i, info := range want.Manifest.Arrays {
				g, w := got.Manifest.Arrays[i].Tolerance, info.Tolerance
				if (g == nil) != (w == nil) || g != nil && (g.ATol != w.ATol || g.RTol != w.RTol) {
					t.Errorf("%s under %s: %s: tolerance %+v, want %+v", name, pn, info.Name, g, w)
				}
			}
		}
	}
}
