package modcase

import (
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
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
