package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGenerateUnmeasured: the fuzzer's case is gen --config's, arrays bit
// for bit, with no catches; written for scratch, its files are Write's.
func TestGenerateUnmeasured(t *testing.T) {
	g, err := GenConfigOf(Embedded(), "layer-padding")
	if err != nil {
		t.Fatal(err)
	}
	measured, err := GenerateFromConfig(g)
	if err != nil {
		t.Fatal(err)
	}
	c, err := GenerateUnmeasured(g)
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
	for _, f := range []string{"layer-padding.json", "layer-padding.npz"} {
		x, errA := os.ReadFile(filepath.Join(a, f))
		y, errB := os.ReadFile(filepath.Join(b, f))
		if errA != nil || errB != nil || !bytes.Equal(x, y) {
			t.Errorf("%s: WriteScratch wrote other bytes than Write (%v, %v)", f, errA, errB)
		}
	}
}
