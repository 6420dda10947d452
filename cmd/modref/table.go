package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/judge"
)

// byExcess returns a case's arrays ranked by error over tolerance
// (diagnose.Excess, the number that decides pass or fail: above 1 the array
// fails), worst first; ties keep the manifest's order.
func byExcess(r *judge.CaseResult) []judge.ArrayResult {
	ranked := slices.Clone(r.Arrays)
	slices.SortStableFunc(ranked, func(a, b judge.ArrayResult) int {
		return -cmpExcess(diagnose.Excess(a), diagnose.Excess(b))
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
	e := diagnose.Excess(a)
	if math.IsInf(e, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.2g", e)
}

// table is check's table: rows of tab-separated cells aligned together,
// and notes under a row (a routing mismatch's or a flip report's lines)
// that take no part in the alignment. A tabwriter ends its columns at a
// line without tabs, so notes written through it would break the table
// into blocks aligned apart.
type table struct {
	rows  []string
	under [][]string
}

// row adds a row, its cells separated by tabs.
func (t *table) row(format string, args ...any) {
	t.rows = append(t.rows, fmt.Sprintf(format, args...))
	t.under = append(t.under, nil)
}

// notes adds lines under the last row.
func (t *table) notes(lines []string) {
	n := len(t.rows) - 1
	t.under[n] = append(t.under[n], lines...)
}

// write writes the rows aligned, each followed by its notes.
func (t *table) write(w io.Writer) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
	lines := strings.SplitAfter(buf.String(), "\n")
	for i, r := range t.rows {
		// A row holding a newline (a bad input's joined errors) is as
		// many lines.
		n := strings.Count(r, "\n") + 1
		io.WriteString(w, strings.Join(lines[:n], ""))
		lines = lines[n:]
		for _, n := range t.under[i] {
			fmt.Fprintln(w, n)
		}
	}
}
