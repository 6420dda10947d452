package fmacheck

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/modref/modref/internal/race"
)

var compiled = flag.Bool("compiled", false, "build for every fusing target and check the compiled code (minutes of CPU; .ci/run sets it)")

// skipUnlessCompiled skips t unless -compiled is set: cross-compiling the
// standard library and the module for six targets takes minutes of CPU on a
// fresh machine, too long for the README's test command.
func skipUnlessCompiled(t *testing.T) {
	t.Helper()
	if !*compiled {
		t.Skip("cross-compiles for every fusing target (minutes of CPU); .ci/run sets -compiled")
	}
	race.SkipShort(t, "a cross-compilation the race detector only slows")
}

// TestCompiledFindsFusions builds a small module for arm64 and checks that
// Compiled reports the product the compiler fused, neither the rounded one
// nor the one math.FMA asks for, at its line.
func TestCompiledFindsFusions(t *testing.T) {
	skipUnlessCompiled(t)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/p\n\ngo 1.22\n",
		"p.go": `package p

import "math"

//go:noinline
func F(x, y, z float64) float64 {
	return x*y + z
}

//go:noinline
func G(x, y, z float64) float64 {
	return float64(x*y) + z
}

//go:noinline
func H(x, y, z float64) float64 {
	return math.FMA(x, y, z)
}
`,
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := Compiled(dir, FusingTargets[2], "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].File != "p.go" || found[0].Line != 7 || found[0].Source != "return x*y + z" {
		t.Fatalf("found %v, want one fusion, at p.go:7 (x*y + z)", found)
	}
}

// TestNoCompiledFusions enforces the FMA rule of docs/design.md on what the
// compiler really emits, where the source lint (Check) cannot see: products
// stored in one statement and added in another, and products and additions
// that meet only after inlining, across functions and packages. It builds
// the whole module for every fusing target and fails for every fused
// multiply-add that no math.FMA asks for.
func TestNoCompiledFusions(t *testing.T) {
	skipUnlessCompiled(t)
	for _, target := range FusingTargets {
		found, err := Compiled(filepath.Join("..", ".."), target, "./...")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("the compiler fused a multiply-add; round the product explicitly, float64(x*y) or float32(x*y), in the statement that makes it: %s", f)
		}
	}
}
