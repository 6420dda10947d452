package judge

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

// Departure says where a candidate first departs from the oracle, stage by
// stage in the order a routed layer (or a model, layer by layer) computes,
// and how (docs/golden-format.md, "Where a candidate first departs"). It is
// a reading of the arrays the candidate wrote and the case's own: it
// recomputes nothing, so it is how diagnose describes a bug no known
// deviation explains.
type Departure struct {
	// Stage is the first stage whose array is outside tolerance: "router
	// weights", "predictor logits", "capacity and selection", "output
	// weights", "multipliers", "output", "experts", "auxiliary losses",
	// "loss", "decoding" or "gradients".
	Stage string `json:"stage"`
	// Layer is the routed layer the stage belongs to in a model or decode
	// case (−1 when the stage is the whole model's, or the case has one
	// layer).
	Layer int `json:"layer"`
	// Array is the first array outside tolerance, in computation order
	// (for gradients, in the order the backward pass makes them).
	Array string `json:"array"`
	// How describes the difference: which rows and positions, and its
	// pattern when it has one.
	How string `json:"how"`
	// Right lists the arrays of earlier stages that match the oracle;
	// Later the arrays after Array that are outside tolerance too.
	Right []string `json:"right"`
	Later []string `json:"later"`
}

// stageOrder is where an expected array's stage falls in the computation:
// its layer (len(layers) for the model's own arrays after the layers) and
// the stage's rank within it; grad is true for gradients, which come last,
// in backward order.
type stageOrder struct {
	grad  bool
	layer int
	rank  int
	stage string
}

// stages of a routed layer, in the order it computes them.
var layerStages = []struct{ suffix, stage string }{
	{"router_logits", "router weights"},
	{"predictor_logits", "predictor logits"},
	{"selected", "capacity and selection"},
	{"weights", "output weights"},
	{"multipliers", "multipliers"},
	{"gates", "experts"},
	{"expert_choice", "experts"},
	{"out", "output"},
	{"targets", "auxiliary losses"},
	{"predictor_accuracy", "auxiliary losses"},
	{"aux.router_bce", "auxiliary losses"},
	{"aux.predictor_bce", "auxiliary losses"},
	{"aux.load_balance", "auxiliary losses"},
	{"aux.total", "auxiliary losses"},
	{"logits", "output"},
	{"ce", "loss"},
	{"loss", "loss"},
	{"decode_logits", "decoding"},
	{"routed", "decoding"},
}

var layerArray = regexp.MustCompile(`^L(\d+)\.(.*)$`)

// orderOf places a candidate array name in the computation of a case with
// n layers.
func orderOf(name string, n int) stageOrder {
	if rest, ok := strings.CutPrefix(name, "grad."); ok {
		o := stageOrder{grad: true, layer: -1, stage: "gradients"}
		if m := layerArray.FindStringSubmatch(strings.TrimPrefix(rest, "param.")); m != nil {
			o.layer, _ = strconv.Atoi(m[1])
		}
		switch {
		case rest == "input.x":
			o.layer = -2 // the layer's input gradient is its backward pass's last
		case o.layer < 0 && (strings.HasPrefix(rest, "param.Embed") || strings.HasPrefix(rest, "param.PosEmbed")):
			o.layer = -2 // a model's embedding comes after every layer's
		case o.layer < 0 && n > 0:
			o.layer = n // the head and final norm, before every layer's
		}
		return o
	}
	o := stageOrder{layer: -1}
	base := name
	if m := layerArray.FindStringSubmatch(name); m != nil {
		o.layer, _ = strconv.Atoi(m[1])
		base = m[2]
	} else if n > 0 {
		o.layer = n
	}
	for i, s := range layerStages {
		if base == s.suffix {
			o.rank, o.stage = i, s.stage
			if base == "decode_logits" || base == "routed" {
				o.layer = n + 1 // decoding is judged after the full forward
			}
			return o
		}
	}
	o.rank, o.stage = len(layerStages), "output"
	return o
}

// compareOrder sorts arrays in computation order: forward stages by layer
// and stage, then gradients in backward order (by descending layer).
func compareOrder(a, b stageOrder) int {
	switch {
	case a.grad != b.grad:
		if a.grad {
			return 1
		}
		return -1
	case a.grad:
		return cmp.Compare(b.layer, a.layer)
	case a.layer != b.layer:
		return cmp.Compare(a.layer, b.layer)
	}
	return cmp.Compare(a.rank, b.rank)
}

// Depart reads where the candidate first departs from the case, given its
// comparison with the case (Compare's result; arrays missing from it are
// passed over); nil when every array it has passes.
func Depart(c *format.Case, cand map[string]*format.Array, res *CaseResult) *Departure {
	n := len(c.Manifest.Config.Layers)
	all := InComputeOrder(c, res.Arrays)
	first := slices.IndexFunc(all, func(a ArrayResult) bool { return a.Status != StatusPass })
	if first < 0 {
		return nil
	}
	f := all[first]
	o := orderOf(f.Name, n)
	d := &Departure{Stage: o.stage, Layer: o.layer, Array: f.Name, Right: []string{}, Later: []string{}}
	if d.Layer >= n || d.Layer < 0 || n == 0 {
		d.Layer = -1
	}
	for _, a := range all[:first] {
		d.Right = append(d.Right, a.Name)
	}
	for _, a := range all[first+1:] {
		if a.Status != StatusPass {
			d.Later = append(d.Later, a.Name)
		}
	}
	d.How = describeDeparture(c, cand, f)
	return d
}

// InComputeOrder returns the array results of a comparison with case c
// that are not missing (a missing array is no departure: it says nothing),
// in the order Depart reads them: forward stages layer by layer, then
// gradients in backward order; arrays of one stage in their order in
// arrays.
func InComputeOrder(c *format.Case, arrays []ArrayResult) []ArrayResult {
	n := len(c.Manifest.Config.Layers)
	type placed struct {
		a ArrayResult
		o stageOrder
		i int
	}
	var all []placed
	for i, a := range arrays {
		if a.Status != StatusMissing {
			all = append(all, placed{a, orderOf(a.Name, n), i})
		}
	}
	slices.SortStableFunc(all, func(x, y placed) int {
		if r := compareOrder(x.o, y.o); r != 0 {
			return r
		}
		return cmp.Compare(x.i, y.i)
	})
	out := make([]ArrayResult, len(all))
	for i, p := range all {
		out[i] = p.a
	}
	return out
}

// describeDeparture says how an array departs from the oracle's: by the
// kind of array, the pattern of the difference.
func describeDeparture(c *format.Case, cand map[string]*format.Array, a ArrayResult) string {
	want := c.Arrays[expectedName(a.Name)]
	got := cand[a.Name]
	if want == nil || got == nil {
		return "missing from the candidate"
	}
	if strings.HasSuffix(a.Name, "selected") && got.IsInt() && len(got.Shape) == 2 {
		return describeSelection(c, got, a)
	}
	if want.IsInt() {
		return fmt.Sprintf("differs at %v (got %g, want %g)", a.Where, a.Got, a.Want)
	}
	g := asFloat64(got)
	if len(g.F) != len(want.F) {
		return fmt.Sprintf("shape %v, want %v", got.Shape, want.Shape)
	}
	tol := a.Tolerance
	wrong := func(k int) bool {
		return judged(c, want.Shape, k) && math.Abs(g.F[k]-want.F[k]) > tol.ATol+float64(tol.RTol*math.Abs(want.F[k]))
	}
	var parts []string
	if p := pattern(g.F, want.F, func(k int) bool { return judged(c, want.Shape, k) }, tol); p != "" {
		parts = append(parts, p)
	} else if zeroWhereWrong(g.F, want.F, wrong) {
		parts = append(parts, "0 at every element where it is wrong, where the oracle's is not: nothing reaches them")
	}
	if w := wherePattern(c, a.Name, want.Shape, wrong); w != "" {
		parts = append(parts, w)
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("worst at %v (got %.8g, want %.8g)", a.Where, a.Got, a.Want))
	}
	return strings.Join(parts, "; ")
}

// expectedName is the case's name for a candidate array.
func expectedName(name string) string {
	if strings.HasPrefix(name, "grad.") {
		return name
	}
	return "expected." + name
}

// asFloat64 is a float array, integers converted.
func asFloat64(a *format.Array) *format.Array {
	if a.IsInt() {
		return asFloat(a)
	}
	return a
}

// pattern names a relation between the candidate's values and the oracle's
// that holds at every judged element within the tolerance: zero, a
// constant, the opposite sign, a constant factor, a constant offset, or
// the oracle's value passed through a sigmoid or exp (a weight computed
// from the right one the wrong way); "" when none does.
func pattern(got, want []float64, use func(k int) bool, tol format.Tolerance) string {
	within := func(f func(w float64) float64) bool {
		n := 0
		for k, w := range want {
			if !use(k) {
				continue
			}
			v := f(w)
			if math.IsNaN(v) || math.Abs(got[k]-v) > tol.ATol+float64(tol.RTol*math.Abs(v)) {
				return false
			}
			n++
		}
		return n > 0
	}
	// A factor and an offset from the largest oracle value, checked
	// everywhere.
	var big, mean, n float64 = 0, 0, 0
	kb := -1
	for k, w := range want {
		if use(k) {
			mean += got[k] - w
			n++
			if math.Abs(w) > big {
				big, kb = math.Abs(w), k
			}
		}
	}
	if n == 0 {
		return ""
	}
	mean /= n
	first := got[0]
	for k := range got {
		if use(k) {
			first = got[k]
			break
		}
	}
	switch {
	case within(func(float64) float64 { return 0 }):
		return "zero everywhere, where the oracle's is not"
	case within(func(float64) float64 { return first }):
		return fmt.Sprintf("the constant %.6g everywhere", first)
	case within(func(w float64) float64 { return -w }):
		return "the oracle's with the opposite sign"
	case kb >= 0 && within(func(w float64) float64 { return w * got[kb] / want[kb] }):
		return fmt.Sprintf("the oracle's times %.6g everywhere", got[kb]/want[kb])
	case within(func(w float64) float64 { return w + mean }):
		return fmt.Sprintf("the oracle's plus %.6g everywhere", mean)
	case within(func(w float64) float64 { return 1 / (1 + math.Exp(-w)) }):
		return "sigmoid of the oracle's"
	case within(func(w float64) float64 { return math.Exp(w) }):
		return "exp of the oracle's"
	}
	return ""
}

// zeroWhereWrong reports whether the candidate's value is 0 at every
// element that is wrong (and some is).
func zeroWhereWrong(got, want []float64, wrong func(k int) bool) bool {
	n := 0
	for k := range want {
		if wrong(k) {
			if got[k] != 0 {
				return false
			}
			n++
		}
	}
	return n > 0
}

// wherePattern says where an array of a layer or model case is wrong: for
// a B×S… array, which rows, and whether the wrong tokens are the
// selected ones, the others, or some of each; for other arrays, how many
// elements.
func wherePattern(c *format.Case, name string, shape []int, wrong func(k int) bool) string {
	cfg := c.Manifest.Config
	total, bad := 0, 0
	for k := range format.Elements(shape) {
		if judged(c, shape, k) {
			total++
			if wrong(k) {
				bad++
			}
		}
	}
	if len(shape) < 2 || shape[0] != cfg.Batch || shape[1] != cfg.SeqLen {
		if total <= 1 {
			return ""
		}
		return fmt.Sprintf("%d of %d elements outside tolerance", bad, total)
	}
	inner := format.Elements(shape[2:])
	tok := func(b, i int) bool {
		for j := range inner {
			if wrong((b*cfg.SeqLen+i)*inner + j) {
				return true
			}
		}
		return false
	}
	sel := SelectedMask(c, name)
	var rows []string
	var inSel, inSelAll, outSel, outSelAll int
	for b := range cfg.Batch {
		var pos []int
		for i := range oracle.ValidLen(cfg.ValidLengths, b, cfg.SeqLen) {
			w := tok(b, i)
			if w {
				pos = append(pos, i)
			}
			if sel != nil && sel[b][i] {
				inSelAll++
				if w {
					inSel++
				}
			} else if sel != nil {
				outSelAll++
				if w {
					outSel++
				}
			}
		}
		if len(pos) > 0 {
			rows = append(rows, fmt.Sprintf("row %d at %s", b, positions(pos, oracle.ValidLen(cfg.ValidLengths, b, cfg.SeqLen))))
		}
	}
	s := "wrong in " + strings.Join(rows, ", ")
	if len(rows) == 0 {
		return ""
	}
	if sel != nil {
		s += fmt.Sprintf(" (%d of %d selected tokens, %d of %d others)", inSel, inSelAll, outSel, outSelAll)
		switch {
		case outSel == 0 && inSel > 0 && inSel < inSelAll:
			s += ": right at some selected tokens and wrong at others"
		case outSel == 0 && inSel == inSelAll:
			s += ": at every selected token, and only there"
		case inSel == 0:
			s += ": only at tokens outside the selection, which pass through unchanged (docs/spec.md §6)"
		}
	}
	return s
}

// SelectedMask is the oracle's selection of the layer an array belongs to
// (a layer case's; L<l>'s in a model), by row and position; nil when the
// case has none there.
func SelectedMask(c *format.Case, name string) [][]bool {
	prefix := "expected."
	if m := layerArray.FindStringSubmatch(strings.TrimPrefix(name, "grad.")); m != nil && !strings.HasPrefix(name, "grad.") {
		prefix = "expected.L" + m[1] + "."
	}
	a := c.Arrays[prefix+"selected"]
	cfg := c.Manifest.Config
	if a == nil || len(a.Shape) != 2 || a.Shape[0] != cfg.Batch {
		return nil
	}
	m := make([][]bool, cfg.Batch)
	for b := range m {
		m[b] = make([]bool, cfg.SeqLen)
		for _, p := range a.I[b*a.Shape[1] : (b+1)*a.Shape[1]] {
			if p >= 0 && int(p) < cfg.SeqLen {
				m[b][p] = true
			}
		}
	}
	return m
}

// describeSelection reads a routing mismatch: how many tokens each row
// selected against the oracle's k, and whether the candidate's selection
// is the top-k of another scope (the whole batch, the padded positions
// too, the lowest weights, the largest |r|, the first positions, the
// oracle's shifted by one), or the right positions in another order.
func describeSelection(c *format.Case, got *format.Array, a ArrayResult) string {
	order := len(a.Routing) > 0
	same := true
	var counts []string
	for _, m := range a.Routing {
		order = order && m.Order
		same = same && m.Candidate == m.Oracle
		counts = append(counts, fmt.Sprintf("row %d: %d, the oracle %d", m.Row, m.Candidate, m.Oracle))
	}
	if order {
		return "the same positions in another order in every row that differs: the indices were not sorted (docs/spec.md §4)"
	}
	var parts []string
	if !same {
		parts = append(parts, "a different number of tokens per row ("+strings.Join(counts, "; ")+")")
	}
	if s := selectionScope(c, a.Name, selectedSets(got)); s != "" {
		parts = append(parts, "the candidate's selection is "+s)
	}
	for _, m := range a.Routing {
		if !m.Order {
			parts = append(parts, fmt.Sprintf("row %d: only the candidate %s, only the oracle %s", m.Row, PositionList(m.OnlyCandidate), PositionList(m.OnlyOracle)))
		}
	}
	return strings.Join(parts, "; ")
}

// selectedSets is a B×k array of positions as sorted rows, −1 dropped.
func selectedSets(a *format.Array) [][]int {
	rows := PositionRows(a)
	for _, row := range rows {
		slices.Sort(row)
	}
	return rows
}

// selectionScope names the rule that gives the candidate's selection sel
// (each row's positions, as many as it selected) from the oracle's router
// weights of the layer, when one of a few does in every row and the
// oracle's does not; "" otherwise.
func selectionScope(c *format.Case, name string, sel [][]int) string {
	cfg := c.Manifest.Config
	r := c.Arrays[strings.TrimSuffix(expectedName(name), "selected")+"router_logits"]
	if r == nil || len(r.Shape) != 2 || r.Shape[0] != len(sel) || r.Shape[1] != cfg.SeqLen {
		return ""
	}
	s := cfg.SeqLen
	row := func(b int) []float64 { return r.F[b*s : (b+1)*s] }
	// top returns the n positions among cands with the largest key, ties
	// to the lower position, sorted.
	top := func(cands []int, n int, key func(p int) float64) []int {
		o := slices.Clone(cands)
		slices.SortStableFunc(o, func(p, q int) int { return cmp.Compare(key(q), key(p)) })
		o = o[:min(n, len(o))]
		slices.Sort(o)
		return o
	}
	first := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		return p
	}
	perRow := func(f func(b int, k int) []int) bool {
		for b, want := range sel {
			if !slices.Equal(f(b, len(want)), want) {
				return false
			}
		}
		return true
	}
	v := func(b int) int { return oracle.ValidLen(cfg.ValidLengths, b, s) }
	rules := []struct {
		what string
		f    func(b, k int) []int
	}{
		{"the k largest router weights of its row over every position, padded ones included", func(b, k int) []int {
			return top(first(s), k, func(p int) float64 { return row(b)[p] })
		}},
		{"the k smallest router weights of its row (the order of top-k reversed)", func(b, k int) []int {
			return top(first(v(b)), k, func(p int) float64 { return -row(b)[p] })
		}},
		{"the k largest |r| of its row", func(b, k int) []int {
			return top(first(v(b)), k, func(p int) float64 { return math.Abs(row(b)[p]) })
		}},
		{"its row's first k positions (the indices into the top-k list taken as positions?)", func(b, k int) []int {
			return first(k)
		}},
	}
	// The top-k over the whole batch, as many as the candidate selected
	// in all.
	var all [][2]int
	n := 0
	for b := range sel {
		for i := range v(b) {
			all = append(all, [2]int{b, i})
		}
		n += len(sel[b])
	}
	slices.SortStableFunc(all, func(p, q [2]int) int { return cmp.Compare(row(q[0])[q[1]], row(p[0])[p[1]]) })
	batch := make([][]int, len(sel))
	for b := range batch {
		batch[b] = []int{}
	}
	for _, p := range all[:min(n, len(all))] {
		batch[p[0]] = append(batch[p[0]], p[1])
	}
	if len(sel) > 1 && perRow(func(b, _ int) []int { slices.Sort(batch[b]); return batch[b] }) {
		return "the top-k of the whole batch's router weights, not of each row (docs/spec.md §4)"
	}
	// The oracle's own rule with the candidate's counts: a capacity
	// difference only, described by the counts.
	if perRow(func(b, k int) []int { return top(first(v(b)), k, func(p int) float64 { return row(b)[p] }) }) {
		return "the top-k of its row's router weights with the candidate's k: only the capacity differs"
	}
	for _, rule := range rules {
		if perRow(rule.f) {
			return rule.what
		}
	}
	for _, shift := range []int{1, -1} {
		if perRow(func(b, k int) []int {
			o := top(first(v(b)), k, func(p int) float64 { return row(b)[p] })
			for i := range o {
				o[i] += shift
			}
			return o
		}) {
			return fmt.Sprintf("the oracle's positions shifted by %+d", shift)
		}
	}
	return ""
}

// PositionRows is a B×k array of positions as rows in the order written,
// −1 dropped.
func PositionRows(a *format.Array) [][]int {
	rows := make([][]int, a.Shape[0])
	for b := range rows {
		rows[b] = []int{}
		for _, p := range a.I[b*a.Shape[1] : (b+1)*a.Shape[1]] {
			if p >= 0 {
				rows[b] = append(rows[b], int(p))
			}
		}
	}
	return rows
}
