package diagnose

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
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

// sigmoidOf is a copy of a with the sigmoid applied to every value: a
// weight computed from the right one the wrong way.
func sigmoidOf(a *format.Array) *format.Array {
	g := *a
	g.F = slices.Clone(a.F)
	for i, v := range g.F {
		g.F[i] = 1 / (1 + math.Exp(-v))
	}
	return &g
}

// departureOf is Depart on a candidate, failing the test on an error.
func departureOf(t *testing.T, c *format.Case, cand map[string]*format.Array) *judge.Departure {
	t.Helper()
	res, err := judge.Compare(c, cand, false)
	if err != nil {
		t.Fatal(err)
	}
	return judge.Depart(c, cand, res)
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
	cand := without((&format.Case{Manifest: c.Manifest, Arrays: arrays}).Candidate(), "weights", "multipliers")
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
	r := oracle.Field(c.Arrays["expected.router_logits"])
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
	batch := &format.Array{Shape: []int{len(r), width}, DType: "<i8"}
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

	dep = departureOf(t, c, perfectWith(c, "weights", sigmoidOf(c.Arrays["expected.weights"])))
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
	mask := judge.SelectedMask(c, "out")
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

// TestDepartureRunsAndZeros: an output right up to a position of each row
// and wrong from it on is read as such, and a gradient that is 0 at the
// tokens where it is wrong (bugs of this test's making: out wrong from
// position 5 on; grad.input.x lost at the unselected tokens).
func TestDepartureRunsAndZeros(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cfg := c.Manifest.Config
	d := cfg.Layer.Block.D
	out := *c.Arrays["expected.out"]
	out.F = slices.Clone(out.F)
	for b := range cfg.Batch {
		for i := 5; i < cfg.SeqLen; i++ {
			out.F[(b*cfg.SeqLen+i)*d] += 1
		}
	}
	dep := departureOf(t, c, perfectWith(c, "out", &out))
	if dep == nil || !strings.Contains(dep.How, "row 0 at every position from 5 on (right before it), row 1 at every position from 5 on") {
		t.Errorf("out wrong from position 5 on: %+v", dep)
	}
	gx := *c.Arrays["grad.input.x"]
	gx.F = slices.Clone(gx.F)
	mask := judge.SelectedMask(c, "grad.input.x")
	for b := range cfg.Batch {
		for i := range cfg.SeqLen {
			if !mask[b][i] {
				clear(gx.F[(b*cfg.SeqLen+i)*d : (b*cfg.SeqLen+i+1)*d])
			}
		}
	}
	dep = departureOf(t, c, perfectWith(c, "grad.input.x", &gx))
	if dep == nil || dep.Array != "grad.input.x" || !strings.Contains(dep.How, "0 at every element where it is wrong") ||
		!strings.Contains(dep.How, "only at tokens outside the selection") {
		t.Errorf("grad.input.x lost outside the selection: %+v", dep)
	}
}

// TestDepartureInAModel: a bug of this test's making in a model, every
// routed layer after the first routing the first one's selection again
// (its routing mask kept across layers; golden/torch plants the same bug,
// mod_torch.BUGS "stale_selection", in .ci/run): the departure is read
// layer by layer, at layer 1's selection, with layer 0's arrays and layer
// 1's router weights right.
func TestDepartureInAModel(t *testing.T) {
	c := loadCase(t, "model-layer-list")
	stale := *c.Arrays["expected.L0.selected"]
	if slices.Equal(stale.I, c.Arrays["expected.L1.selected"].I) {
		t.Fatal("layers 0 and 1 of model-layer-list select the same tokens: the test shows nothing")
	}
	dep := departureOf(t, c, perfectWith(c, "L1.selected", &stale))
	if dep == nil || dep.Stage != "capacity and selection" || dep.Layer != 1 || dep.Array != "L1.selected" ||
		!slices.Equal(dep.Right, []string{"L0.router_logits", "L0.selected", "L0.weights", "L0.multipliers", "L0.out", "L0.targets", "L0.aux.total", "L1.router_logits"}) ||
		!strings.Contains(dep.How, "only the candidate") {
		t.Errorf("stale selection: %+v", dep)
	}
}

// TestDepartureLayerByLayer: a model case's per-layer arrays
// (oracle.LayerStageArrays) read a bug at the layer and stage it first
// shows in, where without them it shows only at its consequences. The bug,
// of this test's making, is the weight applied twice in every routed
// layer (squaredWeight, computed through the emulation): with the
// per-layer arrays it departs at layer 0's output, at every selected
// token and only there, its weights and multipliers right; without them
// (a candidate that leaves the optional arrays out) at a consequence, the
// next routed layer's router weights, layer 0 looking right. And a
// candidate whose layer 2 writes the sigmoid of its weights departs at
// layer 2's output weights.
func TestDepartureLayerByLayer(t *testing.T) {
	c := loadCase(t, "model-every-other")
	d := layerDeviation{name: "squared_weight", output: squaredWeight}
	arrays, err := modelArrays(c, modelSpecOf(c), &d)
	if err != nil {
		t.Fatal(err)
	}
	cand := (&format.Case{Manifest: c.Manifest, Arrays: arrays}).Candidate()
	dep := departureOf(t, c, cand)
	if dep == nil || dep.Stage != "output" || dep.Layer != 0 || dep.Array != "L0.out" ||
		!strings.Contains(dep.How, "at every selected token, and only there") ||
		!slices.Equal(dep.Right, []string{"L0.router_logits", "L0.selected", "L0.weights", "L0.multipliers"}) {
		t.Errorf("squared weight, with the per-layer arrays: %+v", dep)
	}
	var stages []string
	for _, l := range []string{"L0.", "L2."} {
		for _, n := range oracle.LayerStageArrays {
			stages = append(stages, l+n)
		}
	}
	dep = departureOf(t, c, without(cand, stages...))
	if dep == nil || dep.Array != "L2.router_logits" || dep.Layer != 2 {
		t.Errorf("squared weight, without the per-layer arrays: %+v", dep)
	}

	dep = departureOf(t, c, perfectWith(c, "L2.weights", sigmoidOf(c.Arrays["expected.L2.weights"])))
	if dep == nil || dep.Stage != "output weights" || dep.Layer != 2 || !strings.Contains(dep.How, "sigmoid of the oracle's") ||
		!slices.Contains(dep.Right, "L0.out") || !slices.Contains(dep.Right, "L2.selected") {
		t.Errorf("sigmoid weights in layer 2: %+v", dep)
	}
}

// TestPositionList: short lists as they are, long ones as runs, the first
// few, with their count and range.
func TestPositionList(t *testing.T) {
	long := []int{0, 1, 2, 3, 7, 9, 10}
	for p := 20; p < 60; p += 2 {
		long = append(long, p)
	}
	for _, c := range []struct {
		pos  []int
		want string
	}{
		{nil, "[]"},
		{[]int{3, 7, 9}, "[3 7 9]"},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, "[0-16] (17 positions in 1 run, 0 to 16)"},
		{long, "[0-3 7 9-10 20 22 24 26 28 ...] (27 positions in 23 runs, 0 to 58)"},
	} {
		if got := judge.PositionList(c.pos); got != c.want {
			t.Errorf("PositionList(%v) = %q, want %q", c.pos, got, c.want)
		}
	}
}
