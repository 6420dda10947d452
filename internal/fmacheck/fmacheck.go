// Package fmacheck finds floating-point expressions that a Go compiler may
// fuse into a fused multiply-add.
//
// The Go specification allows x*y + z to be computed with one rounding
// instead of two, and the compilers for arm64, ppc64le, s390x and riscv64 do
// so, as does the amd64 compiler with GOAMD64=v3 or higher. Code that must give the same bits on every
// architecture writes such a product with an explicit conversion,
// float64(x*y) + z, which the specification says must be rounded. modref's
// packages run Check from a test so that an unconverted product cannot creep
// in.
//
// Check looks at one expression at a time. The specification also allows
// fusion across statements (t := x*y; r := t + z); such products must be
// rounded explicitly by hand, and Check does not find them.
package fmacheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/modref/modref/internal/race"
)

// Finding is one expression a compiler could fuse.
type Finding struct {
	Pos  token.Position
	Expr string
}

// String returns the position and the expression, as in "file.go:3:9: x*y + z".
func (f Finding) String() string { return fmt.Sprintf("%s: %s", f.Pos, f.Expr) }

// Check type-checks the non-test Go files of the package in dir that the go
// command would build for this GOOS and GOARCH (file names and build
// constraints, as go/build matches them), and returns
// every addition or subtraction, including += and -=, one of whose operands
// is an unconverted floating-point product.
func Check(dir string) ([]Finding, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fmacheck: %w", err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, name); err != nil {
			return nil, fmt.Errorf("fmacheck: %w", err)
		} else if !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, fmt.Errorf("fmacheck: %w", err)
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check(dir, fset, files, info); err != nil {
		return nil, fmt.Errorf("fmacheck: type-checking %s: %w", dir, err)
	}
	isFloatProduct := func(e ast.Expr) bool {
		for {
			p, ok := e.(*ast.ParenExpr)
			if !ok {
				break
			}
			e = p.X
		}
		b, ok := e.(*ast.BinaryExpr)
		if !ok || b.Op != token.MUL {
			return false
		}
		tv, ok := info.Types[b]
		if !ok || tv.Value != nil { // constants are folded exactly
			return false
		}
		basic, ok := tv.Type.Underlying().(*types.Basic)
		return ok && basic.Info()&types.IsFloat != 0
	}
	var found []Finding
	report := func(n ast.Node) {
		var sb strings.Builder
		if err := printer.Fprint(&sb, fset, n); err != nil {
			sb.WriteString("?")
		}
		found = append(found, Finding{fset.Position(n.Pos()), sb.String()})
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.ADD || n.Op == token.SUB) && (isFloatProduct(n.X) || isFloatProduct(n.Y)) {
					report(n)
				}
			case *ast.AssignStmt:
				if (n.Tok == token.ADD_ASSIGN || n.Tok == token.SUB_ASSIGN) && len(n.Rhs) == 1 && isFloatProduct(n.Rhs[0]) {
					report(n)
				}
			}
			return true
		})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Pos.String() < found[j].Pos.String() })
	return found, nil
}

// Require fails t for every fusable expression Check finds in the package in
// dir, naming where it is; each package calls it from a test.
//
// Under go test -race -short it skips: what a lint of the source finds
// does not depend on the race detector, and type-checking the package's
// imports from source under it took 138 s for golden at a load of 30
// (issue 37). go test runs it, as does -race without -short.
func Require(t testing.TB, dir string) {
	t.Helper()
	race.SkipShort(t, "fmacheck's lint of the source, which the race detector only slows; go test runs it")
	found, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a compiler may fuse this into an FMA; write the product as float32(x*y) or float64(x*y): %s", f)
	}
}
