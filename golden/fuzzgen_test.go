package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestGenerateUnmeasured: the fuzzer's case is gen --config's, arrays bit
// for bit, with no catches; written for scratch, its manifest is Write's
// and its arrays are the case's but the expected ones.
func TestGenerateUnmeasured(t *testing.T) {
	g, err := GenConfigOf(Embedded(), "layer-padding")
	if err != nil {
		t.Fatal(err)
	}
	measured, err := GenerateFromConfig(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := GenerateUnmeasured(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Manifest.Catches) != 0 || len(measured.Manifest.Catches) == 0 {
		t.Errorf("catches %v (measured: %v), want none measured", c.Manifest.Catches, measured.Manifest.Catches)
	}
	sameBits(t, "layer-padding", "GenerateUnmeasured", c, "GenerateFromConfig", measured)
	a, b := t.TempDir(), t.TempDir()
	if err := c.Write(a); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteScratch(b); err != nil {
		t.Fatal(err)
	}
	x, errA := os.ReadFile(filepath.Join(a, "layer-padding.json"))
	y, errB := os.ReadFile(filepath.Join(b, "layer-padding.json"))
	if errA != nil || errB != nil || !bytes.Equal(x, y) {
		t.Errorf("layer-padding.json: WriteScratch wrote other bytes than Write (%v, %v)", errA, errB)
	}
	// The arrays a candidate is handed: all but the expected ones, bit
	// for bit.
	got, err := format.ReadNPZ(filepath.Join(b, "layer-padding.npz"))
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "layer-padding", "written", &format.Case{Arrays: got}, "generated", c)
	for _, info := range c.Manifest.Arrays {
		if _, ok := got[info.Name]; ok == (info.Role == format.RoleExpected) {
			t.Errorf("WriteScratch handed the candidate %s (role %s): %v, want only what is not expected", info.Name, info.Role, ok)
		}
	}
}
