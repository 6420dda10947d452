package diagnose

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestRefuseFD checks the way of a deviation without a backward pass: on a
// case within maxFDWork it is emulated (by finite differences), on a larger
// one it is not, with a reason that says why; a deviation with a backward
// pass is emulated on both.
func TestRefuseFD(t *testing.T) {
	// refuseFD reads the manifest alone: that of a generated case of this
	// configuration (golden/testdata/genmatrix) is its name and sizes.
	raw, err := os.ReadFile("../testdata/genmatrix/matrix-layer-h16-s113.json")
	if err != nil {
		t.Fatal(err)
	}
	var m format.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	big := &format.Case{Manifest: &m}
	twice, _ := findLayerDeviation("residual_twice")
	for _, c := range []struct {
		c       *format.Case
		refused bool
	}{{loadCase(t, "layer-paper"), false}, {big, true}} {
		if w := format.FDWork(c.c.Manifest); (w > format.MaxFDWork) != c.refused {
			t.Fatalf("%s: finite differences take %.3g multiply-adds: the case does not test what it should", c.c.Manifest.Name, w)
		}
		devs := []layerDeviation{{name: "unlisted_deviation"}, twice}
		ems := []emulation{{name: devs[0].name}, {name: devs[1].name}}
		refuseFD(c.c, devs, ems)
		if got := ems[0].reason != ""; got != c.refused {
			t.Errorf("%s: a deviation without a backward pass refused: %v, want %v (reason %q)", c.c.Manifest.Name, got, c.refused, ems[0].reason)
		}
		if c.refused && !strings.Contains(ems[0].reason, "no backward pass yet") {
			t.Errorf("%s: reason %q does not say why", c.c.Manifest.Name, ems[0].reason)
		}
		if ems[1].reason != "" {
			t.Errorf("%s: residual_twice refused: %s", c.c.Manifest.Name, ems[1].reason)
		}
	}
}
