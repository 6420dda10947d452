package elem

import (
	"testing"

	"github.com/modref/modref/internal/fmacheck"
)

// TestNoFusableProducts enforces the FMA rule of docs/design.md: every
// floating-point product that is then added is rounded explicitly.
func TestNoFusableProducts(t *testing.T) {
	fmacheck.Require(t, ".")
}
