package main

import (
	"fmt"
	"math"
	"slices"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/judge"
)

// byExcess returns a case's arrays ranked by error over tolerance
// (golden.Excess, the number that decides pass or fail: above 1 the array
// fails), worst first; ties keep the manifest's order.
func byExcess(r *judge.CaseResult) []judge.ArrayResult {
	ranked := slices.Clone(r.Arrays)
	slices.SortStableFunc(ranked, func(a, b judge.ArrayResult) int {
		return -cmpExcess(golden.Excess(a), golden.Excess(b))
	})
	return ranked
}

func cmpExcess(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// excessText formats an error over tolerance for the table: "0.31", "4.2e+03",
// or "inf" for an array that must match exactly and does not.
func excessText(a judge.ArrayResult) string {
	e := golden.Excess(a)
	if math.IsInf(e, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.2g", e)
}
