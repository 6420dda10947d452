package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
)

// written is what a candidate's arrays show of how it ran one routed layer,
// beyond the values judged: the order in which it wrote each row's selected
// positions and the factors it applied to the block's update. Two port
// forms are read from them (docs/golden-format.md, "Diagnosing a failing
// candidate"): unsorted_indices runs the block in the order the candidate
// wrote, and gather_first_k takes the order top-k returned its indices in
// from the multipliers at positions 0..k−1. The zero value, a candidate
// that shows neither, leaves the emulations their default orders.
type written struct {
	// selected is each row's selected positions as written, −1 dropped;
	// nil when the candidate has no such array.
	selected [][]int
	// multipliers is the candidate's multipliers, B×S; nil when absent.
	multipliers [][]float64
	// tol is the case's tolerance on multipliers.
	tol format.Tolerance
	// fits are the fits of weight_scaled's α to the candidate's arrays of
	// the layer, by source (fitSources), against the oracle's; sources
	// are those arrays (nil where absent), for a fit against an
	// emulation's (fitAgainst).
	fits    [3]scaleFit
	sources [3]*format.Array
}

// writtenByLayer reads what the candidate shows of each routed layer, by
// the prefix of its expected arrays ("expected." in a layer case,
// "expected.L<l>." in a model case). cand may be nil (no candidate).
func writtenByLayer(c *format.Case, cand map[string]*format.Array) map[string]written {
	out := map[string]written{}
	if cand == nil {
		return out
	}
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		a, ok := cand[format.CandidateName(info.Name)]
		if ok {
			addFits(c, out, info, a)
		}
		if !ok || len(a.Shape) != 2 || a.Shape[0] != c.Manifest.Config.Batch {
			continue
		}
		switch {
		case strings.HasSuffix(info.Name, "selected") && a.IsInt():
			prefix := strings.TrimSuffix(info.Name, "selected")
			w := out[prefix]
			w.selected = judge.PositionRows(a)
			out[prefix] = w
		case strings.HasSuffix(info.Name, "multipliers") && !a.IsInt() && a.Shape[1] == c.Manifest.Config.SeqLen:
			prefix := strings.TrimSuffix(info.Name, "multipliers")
			w := out[prefix]
			w.multipliers, w.tol = oracle.Field(a), *info.Tolerance
			out[prefix] = w
		}
	}
	return out
}

// unsortedOrder is the order in which unsorted_indices runs each row's
// selected tokens through the block: the order the candidate wrote them in,
// for every row it wrote as a permutation of sel's, when it wrote some row
// out of ascending order (ok); otherwise none (the caller takes the score
// order).
func (w written) unsortedOrder(sel ref.Selection) (order [][]int, ok bool) {
	if len(w.selected) != len(sel.Rows) {
		return nil, false
	}
	order = make([][]int, len(sel.Rows))
	for b, row := range sel.Rows {
		got := w.selected[b]
		if len(got) != len(row) || !slices.Equal(slices.Sorted(slices.Values(got)), row) {
			continue
		}
		order[b] = slices.Clone(got)
		ok = ok || !slices.IsSorted(got)
	}
	return order, ok
}

// returnedOrder is the order in which the candidate's top-k returned each
// row's selected positions sel, read from its multipliers under
// gather_first_k: that port writes the t-th returned index's weight at
// position t (the argsort of the returned indices, taken as positions), so
// the multiplier at position t is g of the t-th returned token. g holds the
// factor of each selected position (ref's multipliers). A row whose
// multipliers at 0..k−1 are not, within the case's tolerance, the k
// factors of its selection in some order is not read, nor is one in which
// two of those factors are within tolerance of each other (under
// `weighting: none` every factor is 1: the multipliers show no order); ok
// is false unless every row with a selection is read.
func (w written) returnedOrder(sel ref.Selection, g [][]float64) (order [][]int, ok bool) {
	if len(w.multipliers) != len(sel.Rows) {
		return nil, false
	}
	order = make([][]int, len(sel.Rows))
	for b, row := range sel.Rows {
		for i, p := range row {
			for _, q := range row[i+1:] {
				if math.Abs(g[b][p]-g[b][q]) <= w.tol.ATol+float64(w.tol.RTol*math.Abs(g[b][p])) {
					return nil, false
				}
			}
		}
		used := make([]bool, len(row))
		for t := range row {
			m := w.multipliers[b][t]
			best, dist := -1, math.Inf(1)
			for j, p := range row {
				if d := math.Abs(m - g[b][p]); !used[j] && d < dist {
					best, dist = j, d
				}
			}
			if best < 0 || dist > w.tol.ATol+float64(w.tol.RTol*math.Abs(g[b][row[best]])) {
				return nil, false
			}
			used[best] = true
			order[b] = append(order[b], row[best])
		}
	}
	return order, true
}

// showsOrder reports whether the candidate's multipliers of a layer case
// show the order its top-k returned the case's selection in
// (returnedOrder).
func (w written) showsOrder(c *format.Case) bool {
	sel, g := c.Arrays["expected.selected"], c.Arrays["expected.multipliers"]
	if w.multipliers == nil || sel == nil || g == nil || len(g.Shape) != 2 {
		return false
	}
	rows := judge.PositionRows(sel)
	_, ok := w.returnedOrder(ref.Selection{S: c.Manifest.Config.SeqLen, Rows: rows}, oracle.Field(g))
	return ok
}

// writtenFor is the candidate's written arrays of the routed layer whose
// expected arrays start with prefix.
func (d *layerDeviation) writtenFor(prefix string) written {
	if d.written == nil {
		return written{}
	}
	return d.written[prefix]
}

// layerPrefix is the prefix of routed layer l's expected arrays in a model
// case.
func layerPrefix(l int) string { return fmt.Sprintf("expected.L%d.", l) }

// writtenSelection is the selection as the deviant layer writes it: in the
// order it ran each row, when that came from the candidate, else sel.
func (st *layerState) writtenSelection(sel ref.Selection) ref.Selection {
	if st.selectedOrder == nil {
		return sel
	}
	return ref.Selection{S: sel.S, Rows: st.selectedOrder}
}
