package golden

import (
	"testing"

	"github.com/modref/modref/internal/fmacheck"
)

// TestNoFusableProducts requires every floating-point product that is added
// to be written float64(x*y), so that no compiler fuses it (the FMA rule).
func TestNoFusableProducts(t *testing.T) {
	found, err := fmacheck.Check(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a product a compiler may fuse into an FMA: %s", f)
	}
}
