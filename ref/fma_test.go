package ref

import (
	"testing"

	"github.com/modref/modref/internal/fmacheck"
)

// A compiler may fuse x*y + z into one FMA rounding (arm64, ppc64le, s390x
// and riscv64 do; amd64 does not), which would make the reference give
// different bits on different architectures. Every such product is written
// float64(x*y), which the specification says must be rounded on its own.
func TestNoFusableProducts(t *testing.T) {
	found, err := fmacheck.Check(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a compiler may fuse this into an FMA; write the product as float64(x*y): %s", f)
	}
}
