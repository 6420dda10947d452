package diagnose

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
)

// writtenCandidate is the candidate an implementation with deviation name
// writes for the case when it shows w of its layer (a layer case).
func writtenCandidate(t *testing.T, c *format.Case, name string, w written) map[string]*format.Array {
	t.Helper()
	d, ok := findLayerDeviation(name)
	if !ok {
		t.Fatalf("no deviation %s", name)
	}
	d.written = map[string]written{"expected.": w}
	arrays, err := layerArrays(c, layerSpecOf(c), &d)
	if err != nil {
		t.Fatal(err)
	}
	return (&format.Case{Manifest: c.Manifest, Arrays: arrays}).Candidate()
}

// matched lists the names of the results that match.
func matched(rs []DeviationResult) []string {
	var out []string
	for _, r := range rs {
		if r.Match {
			out = append(out, r.Name)
		}
	}
	return out
}

// matchedLabels lists the results that match by name and variant.
func matchedLabels(rs []DeviationResult) []string {
	var out []string
	for _, r := range rs {
		if r.Match {
			out = append(out, label(r))
		}
	}
	return out
}

// TestUnsortedIndicesAsWritten: a port that runs each row's selected
// tokens in its own order (here descending position, which no top-k
// returns) and writes selected in that order is named unsorted_indices:
// the emulation runs the order the candidate wrote. The score-order
// emulation, all diagnose had before, does not explain that candidate.
func TestUnsortedIndicesAsWritten(t *testing.T) {
	c := loadCase(t, "layer-paper")
	order := judge.PositionRows(c.Arrays["expected.selected"])
	for _, row := range order {
		slices.Reverse(row)
	}
	cand := writtenCandidate(t, c, "unsorted_indices", written{selected: order})
	if got := judge.PositionRows(cand["selected"]); !slices.EqualFunc(got, order, slices.Equal) {
		t.Fatalf("the emulation wrote selected %v, want the order it ran %v", got, order)
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); !slices.Equal(got, []string{"unsorted_indices"}) {
		t.Errorf("matched %v, want unsorted_indices", got)
	}
	written := cand["selected"]
	cand["selected"] = c.Arrays["expected.selected"]
	rs, err = Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); slices.Contains(got, "unsorted_indices") {
		t.Errorf("with selected written sorted (score order emulated), matched %v", got)
	}
	// check: the oracle's values with selected in the written order.
	res, err := judge.Compare(c, perfectWith(c, "selected", written), false)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Arrays, func(a judge.ArrayResult) bool { return a.Name == "selected" })
	if i < 0 {
		t.Fatal("no result for selected")
	}
	r := res.Arrays[i]
	if r.Status != judge.StatusFail || len(r.Routing) != len(order) {
		t.Fatalf("selected in another order: %+v", r)
	}
	for _, m := range r.Routing {
		if !m.Order || m.OnlyCandidate != nil || m.OnlyOracle != nil {
			t.Errorf("row %d: %+v, want the same positions in another order", m.Row, m)
		}
	}
}

// perfectWith is the case's own values with one array replaced.
func perfectWith(c *format.Case, name string, a *format.Array) map[string]*format.Array {
	cand := c.Candidate()
	cand[name] = a
	return cand
}

// ascendingMultipliers are the multipliers of the routed layer whose
// expected arrays start with prefix as a port writes them whose top-k
// returns its indices in ascending position order (the t-th index's
// weight at t), and the case's tolerance on them.
func ascendingMultipliers(c *format.Case, prefix string) ([][]float64, format.Tolerance) {
	sel := judge.PositionRows(c.Arrays[prefix+"selected"])
	mult := oracle.Field(c.Arrays[prefix+"multipliers"])
	m := make([][]float64, len(sel))
	for b, row := range sel {
		m[b] = make([]float64, c.Manifest.Config.SeqLen)
		for t, p := range row {
			m[b][t] = mult[b][p]
		}
	}
	var tol format.Tolerance
	for _, info := range c.Manifest.Arrays {
		if info.Name == prefix+"multipliers" {
			tol = *info.Tolerance
		}
	}
	return m, tol
}

// TestGatherFirstKOrderFromMultipliers: a port whose top-k returns its
// indices in ascending position order (not descending weight, the default
// emulated) gathers positions 0..k−1 in order; diagnose reads that order
// from the multipliers it wrote and names gather_first_k. The default
// order, descending weight, does not explain that candidate.
func TestGatherFirstKOrderFromMultipliers(t *testing.T) {
	c := loadCase(t, "layer-paper")
	m, tol := ascendingMultipliers(c, "expected.")
	s := c.Manifest.Config.SeqLen
	cand := writtenCandidate(t, c, "gather_first_k", written{multipliers: m, tol: tol})
	for b := range m {
		if got := cand["multipliers"].F[b*s : (b+1)*s]; !slices.Equal(got, m[b]) {
			t.Fatalf("row %d: the emulation wrote multipliers %v, want %v", b, got, m[b])
		}
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); !slices.Equal(got, []string{"gather_first_k"}) {
		t.Errorf("matched %v, want gather_first_k", got)
	}
	def, err := DeviantCandidate(c, "gather_first_k", "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := judge.Compare(&format.Case{Manifest: c.Manifest, Arrays: expectedOf(c, def)}, cand, false); err != nil || res.Pass {
		t.Errorf("the descending-weight emulation explains the candidate too (err %v): the test shows nothing", err)
	}
}

// TestGatherFirstKOrderFromModelMultipliers: in a model case, the order a
// port's top-k returned its indices in is read from the per-layer
// multipliers it wrote (L<l>.multipliers, optional): a routed layer's
// top-k returning ascending positions is named gather_first_k (layer 1
// of model-dense-ends; a model's first layer reads embeddings, whose
// repeated tokens tie, and tied multipliers show no order); without the
// per-layer arrays the order cannot be read, and the default emulated
// order does not explain the candidate.
func TestGatherFirstKOrderFromModelMultipliers(t *testing.T) {
	c := loadCase(t, "model-dense-ends") // layer 1, after a dense layer: weights distinct, top-k order not its positions in either row
	m, tol := ascendingMultipliers(c, "expected.L1.")
	s := c.Manifest.Config.SeqLen
	d, _ := findLayerDeviation("gather_first_k")
	d.written = map[string]written{"expected.L1.": {multipliers: m, tol: tol}}
	arrays, err := modelArrays(c, modelSpecOf(c), &d)
	if err != nil {
		t.Fatal(err)
	}
	cand := (&format.Case{Manifest: c.Manifest, Arrays: arrays}).Candidate()
	for b := range m {
		if got := cand["L1.multipliers"].F[b*s : (b+1)*s]; !slices.Equal(got, m[b]) {
			t.Fatalf("row %d: the emulation wrote multipliers %v, want %v", b, got, m[b])
		}
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); !slices.Contains(got, "gather_first_k") {
		t.Errorf("matched %v, want gather_first_k", got)
	}
	var stages []string
	for name := range cand {
		if !strings.HasPrefix(name, "grad.") && judge.Optional(c, "expected."+name) {
			stages = append(stages, name)
		}
	}
	rs, err = Diagnose(c, without(cand, stages...))
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); slices.Contains(got, "gather_first_k") {
		t.Errorf("without the per-layer arrays, matched %v (%v): the default order explains the candidate, the test shows nothing", got, matchedLabels(rs))
	}
}

// expectedOf is a candidate's arrays as a case's expected arrays, with the
// case's inputs and parameters.
func expectedOf(c *format.Case, cand map[string]*format.Array) map[string]*format.Array {
	arrays := make(map[string]*format.Array, len(c.Arrays))
	for name, a := range c.Arrays {
		arrays[name] = a
		if b, ok := cand[format.CandidateName(name)]; ok && name != format.CandidateName(name) {
			arrays[name] = b
		}
	}
	return arrays
}

// TestSharedRouter: with one router for every routed layer, the later
// routed layers' own router parameters are unused (gradient 0) and the
// first's gradient sums over the layers; diagnose names the deviation on a
// model case and says why a layer case or a model with one routed layer
// cannot show it.
func TestSharedRouter(t *testing.T) {
	c := loadCase(t, "model-every-other")
	cand, err := DeviantCandidate(c, "shared_router", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range cand["grad.param.L2.Router"].F {
		if v != 0 {
			t.Fatalf("grad.param.L2.Router = %v, want 0: the layer's own router is unused", cand["grad.param.L2.Router"].F)
		}
	}
	if slices.Equal(cand["grad.param.L0.Router"].F, c.Arrays["grad.param.L0.Router"].F) {
		t.Error("the shared router's gradient is layer 0's alone")
	}
	if !slices.Equal(cand["L0.router_logits"].F, c.Arrays["expected.L0.router_logits"].F) {
		t.Error("layer 0, whose router is its own, routes differently")
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := matched(rs); !slices.Equal(got, []string{"shared_router"}) {
		t.Errorf("matched %v, want shared_router", got)
	}
	// Every case that claims it (golden/torch/audit_catches.py checks the
	// claims with PyTorch) tells it from the oracle here too.
	names, err := format.List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, name := range names {
		c := loadCase(t, name)
		if !slices.Contains(c.Manifest.Catches, "shared_router") {
			continue
		}
		claims++
		d, _ := findLayerDeviation("shared_router")
		ems := []emulation{{name: d.name}}
		if err := emulateDeviations(c, []layerDeviation{d}, ems, nil); err != nil {
			t.Fatal(err)
		}
		if r, err := judgeDeviation(c, c.Candidate(), ems[0]); err != nil || !r.Distinct || r.Match {
			t.Errorf("%s claims shared_router: distinct %v, the case's values match it %v (%v)", name, r.Distinct, r.Match, err)
		}
	}
	if claims < 10 {
		t.Errorf("%d cases claim shared_router", claims)
	}
	for name, want := range map[string]string{"layer-paper": "a layer case has one routed layer", "model-predictor": "the model has one routed layer"} {
		if em := findAny(t, emulated(t, loadCase(t, name)), "shared_router"); !strings.HasPrefix(em.reason, want) {
			t.Errorf("%s: shared_router reason %q, want %q", name, em.reason, want)
		}
	}
}

// TestSharedRouterDecoding: in a decode case, a model whose routed layers
// share one router decodes with it as its full forward routes with it: the
// decoding agrees with the forward, both depart from the oracle's, and
// diagnose names shared_router (and nothing on the case's own values).
func TestSharedRouterDecoding(t *testing.T) {
	for _, name := range []string{"decode-router", "decode-predictor"} {
		c := loadCase(t, name)
		cand, err := DeviantCandidate(c, "shared_router", "")
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(cand["logits"].F, c.Arrays["expected.logits"].F) || slices.Equal(cand["decode_logits"].F, c.Arrays["expected.decode_logits"].F) {
			t.Errorf("%s: the shared router changes neither the forward nor the decoding", name)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		if got := matched(rs); !slices.Equal(got, []string{"shared_router"}) {
			t.Errorf("%s: matched %v, want shared_router", name, got)
		}
		rs, err = Diagnose(c, c.Candidate())
		if err != nil {
			t.Fatal(err)
		}
		if got := matched(rs); !slices.Equal(got, []string{OracleName}) {
			t.Errorf("%s: the oracle's values match %v", name, got)
		}
	}
}

// findAny returns the emulation of a deviation, emulated or not.
func findAny(t *testing.T, ems []emulation, name string) emulation {
	t.Helper()
	for _, em := range ems {
		if em.name == name {
			return em
		}
	}
	t.Fatalf("no emulation of %s", name)
	return emulation{}
}

// TestTorchCPUTopK: torchCPUTopK returns the indices in the order torch's
// CPU topk(sorted=False) returned them for rows of golden/testdata (made by
// golden/torch/topk_vectors.py with torch itself; a third with ties).
func TestTorchCPUTopK(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "torch-topk-cpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs struct {
		Torch string
		Rows  []struct {
			R     []float64
			K     int
			Order []int
		}
	}
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	unsorted := 0
	for i, v := range vs.Rows {
		got, ok := torchCPUTopK(v.R, v.K)
		if !ok || !slices.Equal(got, v.Order) {
			t.Errorf("row %d (n %d, k %d): %v, torch %s returned %v", i, len(v.R), v.K, got, vs.Torch, v.Order)
		}
		if !slices.IsSortedFunc(v.Order, func(a, b int) int { return cmp.Compare(v.R[b], v.R[a]) }) {
			unsorted++
		}
	}
	if len(vs.Rows) < 100 || unsorted < len(vs.Rows)/4 {
		t.Errorf("%d rows, %d not in descending order: the rows show little", len(vs.Rows), unsorted)
	}
	if _, ok := torchCPUTopK(make([]float64, 128), 1); ok {
		t.Error("k·64 ≤ n, where torch takes a partial sort, is claimed")
	}
}

// TestGatherFirstKTorchOrder: a port whose top-k is torch.topk(sorted=False)
// on CPU and that writes no multipliers is named by gather_first_k's
// variant with that order, not by the default (descending weight); with
// its multipliers, gather_first_k reads the order from them and the
// variant is not offered.
func TestGatherFirstKTorchOrder(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand, err := DeviantCandidate(c, "gather_first_k", torchTopKVariant)
	if err != nil {
		t.Fatal(err)
	}
	def, err := DeviantCandidate(c, "gather_first_k", "")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(cand["out"].F, def["out"].F) {
		t.Fatal("torch's order is descending weight on layer-paper: the test shows nothing")
	}
	rs, err := Diagnose(c, without(cand, "multipliers"))
	if err != nil {
		t.Fatal(err)
	}
	named := matchedLabels(rs)
	if want := []string{"gather_first_k (" + torchTopKVariant + ")"}; !slices.Equal(named, want) {
		t.Errorf("without multipliers: matched %v, want %v", named, want)
	}
	rs, err = Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Variant == torchTopKVariant {
			t.Errorf("the variant is offered though the multipliers show the order")
		}
		if r.Match != (r.Name == "gather_first_k") {
			t.Errorf("with multipliers: %s match %v", label(r), r.Match)
		}
	}
}

// TestGatherFirstKWeightingNone: under `weighting: none` every multiplier
// is 1, so a candidate's multipliers show no order: gather_first_k is
// named in the order its top-k returned, descending weight or torch's CPU
// order, with the multipliers written as ports write them.
func TestGatherFirstKWeightingNone(t *testing.T) {
	c := loadCase(t, "layer-none")
	for _, variant := range []string{"", torchTopKVariant} {
		cand, err := DeviantCandidate(c, "gather_first_k", variant)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		named := matchedLabels(rs)
		if len(named) == 0 || !strings.HasPrefix(named[0], "gather_first_k") {
			t.Errorf("gather_first_k (variant %q): matched %v", variant, named)
		}
	}
}

// TestCombinationTorchOrder: sramshetty/mixture-of-depths' routed block
// before its fix of 2024-06-06, with top-k's indices in the order
// torch.topk(sorted=False) returns them on CPU and no multipliers written,
// is named as the combination in that variant, which the search grows
// from gather_first_k's variant.
func TestCombinationTorchOrder(t *testing.T) {
	c := loadCase(t, "layer-integer-capacity")
	const port = "residual_twice+rope_gathered_indices+weight_mlp_only+gather_first_k"
	cand, err := DeviantCandidate(c, port, torchTopKVariant)
	if err != nil {
		t.Fatal(err)
	}
	def, err := DeviantCandidate(c, port, "")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(cand["out"].F, def["out"].F) {
		t.Fatal("torch's order is descending weight on layer-integer-capacity: the test shows nothing")
	}
	if _, err := DeviantCandidate(c, "residual_twice+rope_gathered_indices", torchTopKVariant); err == nil {
		t.Error("a combination without gather_first_k is made in torch's order")
	}
	rs, err := Diagnose(c, without(cand, "multipliers"))
	if err != nil {
		t.Fatal(err)
	}
	named := matchedLabels(rs)
	if want := []string{port + " (" + torchTopKVariant + ")"}; !slices.Equal(named, want) {
		t.Errorf("matched %v, want %v", named, want)
	}
}
