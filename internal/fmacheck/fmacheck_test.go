package fmacheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFindsFusableExpressions runs Check on a small package with known
// fusable and safe expressions.
func TestCheckFindsFusableExpressions(t *testing.T) {
	dir := t.TempDir()
	src := `package p

func f(x, y, z float32, a, b int) (float32, int) {
	r := x*y + z           // fusable
	r -= (x * y)           // fusable
	r += float32(x*y) + z  // safe: explicit rounding
	r += x + y             // safe: no product
	n := a*b + a           // safe: integers
	const c = 2.0*3.0 + 1  // safe: constant
	return r + c, n
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || !strings.Contains(found[0].Expr, "x*y + z") || !strings.Contains(found[1].Expr, "r -= (x * y)") {
		t.Fatalf("found %v, want the two fusable lines 4 and 5", found)
	}
	if found[0].Pos.Line != 4 || found[1].Pos.Line != 5 {
		t.Errorf("positions %v and %v, want lines 4 and 5", found[0].Pos, found[1].Pos)
	}
}

// recorder is a testing.TB that records errors instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestRequireReportsEachFinding(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nfunc f(x, y, z float64) float64 { return x*y + z }\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	Require(r, dir)
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "p.go:3") || !strings.Contains(r.errors[0], "x*y + z") {
		t.Errorf("Require reported %q, want one error at p.go:3 naming x*y + z", r.errors)
	}
}
