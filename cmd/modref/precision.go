package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/mod/modcase"
)

// precisionFlag adds --precision to a command and returns its parser: the
// profile named, the zero Profile (the manifests' tolerances) when the flag
// is absent.
func precisionFlag(fs *flagSet) func() (format.Profile, error) {
	name := fs.String("precision", "", "judge by a precision profile's tolerances (`P`: "+strings.Join(format.ProfileNames(), ", ")+
		"), measured on an emulated implementation of that precision (docs/tolerances.md); default: the manifests' float32 tolerances")
	return func() (format.Profile, error) {
		return format.ParseProfile(*name)
	}
}

// underProfile returns the case judged under a profile (the --precision
// flag's, or when that is the zero profile the case's manifest's): its
// tolerances and near-tie margin measured on the profile's emulated
// implementations with the Go loops' bits (modcase.ProfileTolerances: the
// same verdict on every machine), the measurements and the profile used. The zero profile
// returns the case as it is.
func underProfile(c *format.Case, p format.Profile) (*format.Case, *judge.ProfileReport, format.Profile, error) {
	if p.IsZero() {
		var err error
		if p, err = format.ParseProfile(c.Manifest.Precision); err != nil || p.IsZero() {
			return c, nil, p, err
		}
	}
	jc, rep, err := modcase.ProfileTolerances(c, p)
	return jc, rep, p, err
}

// printProfile writes the line that says which tolerances a table uses.
func printProfile(w io.Writer, p format.Profile) {
	if p.IsZero() {
		return
	}
	fmt.Fprintf(w, "precision %s: each array's tolerance is %d × the largest error of a family of emulated %s implementations + %g roundings (%.3g) of its scale and %g of %.3g (docs/tolerances.md, \"Precision profiles\")\n",
		p.Name, format.Multiple, p.Name, p.FloorUnits(), p.Unit, p.FloorUnits(), p.AbsUnit())
}

// uncovered says, for a profile whose family leaves out an implementation
// choice real code makes, which one, so that a failure under it says what
// the tolerances do not cover; "" for the others.
func uncovered(p format.Profile) string {
	if p.Name != "bf16" {
		return ""
	}
	return "note: the bf16 profile's family accumulates products in float32 and rounds them to bf16, and, as Debian's PyTorch 1.13 does on a CPU with AVX-512 " +
		"in pure bf16 and under CPU autocast alike, accumulates in bf16 every product of at most 16³ multiply-adds and its weight gradient, at the shapes modref computes them " +
		"(every row's tokens in one product), and sums native LayerNorm's gain and bias gradients over the tokens in bf16 in pure bf16; " +
		"it does not cover bf16 accumulation of larger products (PyTorch 1.13 on a CPU without AVX-512 accumulates every bf16 product in bf16), " +
		"nor of products a candidate splits smaller (one batch row or one token at a time): " +
		"such a candidate can exceed these tolerances there without a bug (docs/tolerances.md, \"Products accumulated in bf16\")"
}
