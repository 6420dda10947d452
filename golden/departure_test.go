package golden

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"testing"
)

// squaredWeight is a bug of this test's making, on no list: the weight
// applied twice, out = x + g²·f for a selected token.
func squaredWeight(l *layerRun) {
	l.out = l.eachRow(func(b, i int, x, _, upd []float64, mult float64) []float64 {
		row := make([]float64, len(x))
		for j := range row {
			row[j] = x[j] + float64(float64(mult*mult)*upd[j])
		}
		return row
	})
}

// departureOf is Depart on a candidate, failing the test on an error.
func departureOf(t *testing.T, c *Case, cand map[string]*Array) *Departure {
	t.Helper()
	res, err := Compare(c, cand, false)
	if err != nil {
		t.Fatal(err)
	}
	return Depart(c, cand, res)
}

// TestDepartureReadsUnnamedBugs plants bugs that no deviation names, of
// this test's making, and requires Depart to find the stage each first
// shows in, and to say how: the weight applied twice (computed through the
// emulation, gradients included: it first shows in out, at every selected
// token and only there); a selection made as the top-k of the whole batch
// instead of each row; weights that are the sigmoid of the right ones
// under raw weighting; the router's gradient lost (detached); an update
// added at the tokens outside the selection.
func TestDepartureReadsUnnamedBugs(t *testing.T) {
	c := loadCase(t, "layer-paper")
	d := layerDeviation{name: "squared_weight", output: squaredWeight}
	arrays, err := layerArrays(c, layerSpecOf(c), &d)
	if err != nil {
		t.Fatal(err)
	}
	cand := without(candidateOf(&Case{Manifest: c.Manifest, Arrays: arrays}), "weights", "multipliers")
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); len(got) != 0 {
		t.Fatalf("a deviation explains the squared weight: %v", got)
	}
	dep := departureOf(t, c, cand)
	if dep == nil || dep.Stage != "output" || dep.Array != "out" || !strings.Contains(dep.How, "at every selected token, and only there") ||
		!slices.Equal(dep.Right, []string{"router_logits", "selected"}) || !slices.Contains(dep.Later, "grad.param.Router") {
		t.Errorf("squared weight: %+v", dep)
	}

	// The top-k of the whole batch: row 1 of layer-paper has larger
	// router weights.
	sel := c.Arrays["expected.selected"]
	r := field(c.Arrays["expected.router_logits"])
	k := sel.Shape[1]
	var all [][2]int
	for b := range r {
		for i := range r[b] {
			all = append(all, [2]int{b, i})
		}
	}
	slices.SortStableFunc(all, func(p, q [2]int) int {
		return cmp.Compare(r[q[0]][q[1]], r[p[0]][p[1]])
	})
	rows := make([][]int, len(r))
	for _, p := range all[:k*len(r)] {
		rows[p[0]] = append(rows[p[0]], p[1])
	}
	width := 0
	for _, row := range rows {
		slices.Sort(row)
		width = max(width, len(row))
	}
	batch := &Array{Shape: []int{len(r), width}, DType: "<i8"}
	for _, row := range rows {
		for j := range width {
			p := int64(-1)
			if j < len(row) {
				p = int64(row[j])
			}
			batch.I = append(batch.I, p)
		}
	}
	if slices.Equal(batch.I, sel.I) {
		t.Fatal("the batch's top-k is the rows' on layer-paper: the test shows nothing")
	}
	dep = departureOf(t, c, perfectWith(c, "selected", batch))
	if dep == nil || dep.Stage != "capacity and selection" || !strings.Contains(dep.How, "the top-k of the whole batch's router weights") {
		t.Errorf("batch top-k: %+v", dep)
	}

	g := *c.Arrays["expected.weights"]
	g.F = slices.Clone(g.F)
	for i, v := range g.F {
		g.F[i] = 1 / (1 + math.Exp(-v))
	}
	dep = departureOf(t, c, perfectWith(c, "weights", &g))
	if dep == nil || dep.Stage != "output weights" || !strings.Contains(dep.How, "sigmoid of the oracle's") {
		t.Errorf("sigmoid weights: %+v", dep)
	}

	zero := *c.Arrays["grad.param.Router"]
	zero.F = make([]float64, len(zero.F))
	dep = departureOf(t, c, perfectWith(c, "grad.param.Router", &zero))
	if dep == nil || dep.Stage != "gradients" || dep.Array != "grad.param.Router" || !strings.Contains(dep.How, "zero everywhere") || len(dep.Later) != 0 {
		t.Errorf("router gradient lost: %+v", dep)
	}

	out := *c.Arrays["expected.out"]
	out.F = slices.Clone(out.F)
	mask := selectedMask(c, "out")
	dm := c.Manifest.Config.Layer.Block.D
	for b := range mask {
		for i, on := range mask[b] {
			if !on {
				out.F[(b*c.Manifest.Config.SeqLen+i)*dm] += 0.5
			}
		}
	}
	dep = departureOf(t, c, perfectWith(c, "out", &out))
	if dep == nil || dep.Stage != "output" || !strings.Contains(dep.How, "only at tokens outside the selection") {
		t.Errorf("unselected tokens changed: %+v", dep)
	}
}
