package train

import (
	"testing"

	"github.com/modref/modref/internal/fmacheck"
)

// TestNoFusableProducts enforces the reproducibility rule of package mod:
// no floating-point product is added without an explicit rounding.
func TestNoFusableProducts(t *testing.T) {
	fmacheck.Require(t, ".")
}
