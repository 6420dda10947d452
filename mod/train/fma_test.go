package train

import (
	"testing"

	"github.com/modref/modref/internal/fmacheck"
)

// TestNoFusableProducts enforces the reproducibility rule of package mod:
// no floating-point product is added without an explicit rounding.
func TestNoFusableProducts(t *testing.T) {
	found, err := fmacheck.Check(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a compiler may fuse this into an FMA; write the product as float32(x*y) or float64(x*y): %s", f)
	}
}
