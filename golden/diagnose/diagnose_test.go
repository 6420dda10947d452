package diagnose

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// emulations caches emulate's results by case name: the tests share them
// to keep the finite-difference passes few.
var emulations = map[string][]emulation{}

// emulated returns the case's emulations, failing the test on an error.
func emulated(t *testing.T, c *format.Case) []emulation {
	t.Helper()
	if ems, ok := emulations[c.Manifest.Name]; ok {
		return ems
	}
	ems, err := emulate(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emulations[c.Manifest.Name] = ems
	return ems
}

// find returns the emulation of a deviation (the first variant).
func find(t *testing.T, ems []emulation, name string) emulation {
	t.Helper()
	for _, em := range ems {
		if em.name == name {
			if em.reason != "" {
				t.Fatalf("%s is not emulated: %s", name, em.reason)
			}
			return em
		}
	}
	t.Fatalf("no emulation of %s", name)
	return emulation{}
}

func label(r DeviationResult) string {
	if r.Variant != "" {
		return r.Name + " (" + r.Variant + ")"
	}
	return r.Name
}

// TestDiagnoseNamesEachDeviation builds, for every deviation emulated on a
// few cases, a candidate that has it, and requires Diagnose to name exactly
// that deviation and not the oracle; the case's own values match the oracle
// and no deviation that changes an array.
func TestDiagnoseNamesEachDeviation(t *testing.T) {
	want := map[string][]string{
		"layer-paper":           {"residual_twice", "residual_scaled", "unsorted_indices", "no_weighting", "capacity_off_by_one", "rope_gathered_indices", "targets_first_row", "weight_mlp_only", "gather_first_k", "no_causal_mask", "tanh_gate", "skipped_scaled"},
		"layer-losses-sigmoid":  {"tanh_gate", "skipped_scaled", "aux_over_padding", "predictor_block_output"},
		"layer-router-bce":      {"targets_first_row", "rope_gathered_indices"},
		"layer-short-row":       {"capacity_floor_zero", "capacity_off_by_one"},
		"layer-dense-ste":       {"residual_twice", "residual_scaled", "no_weighting", "ste_m_plus_1", "capacity_off_by_one"},
		"layer-predictor":       {"predictor_no_stopgrad", "predictor_block_output"},
		"layer-mlp-only":        {"residual_twice", "residual_scaled", "no_weighting"},
		"layer-causal-router":   {"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"},
		"model-predictor":       {"residual_twice", "unsorted_indices", "predictor_no_stopgrad", "predictor_block_output", "capacity_off_by_one"},
		"decode-predictor":      {"decode_mismatch"},
		"decode-window":         {"decode_mismatch", "window_gathered_indices"},
		"layer-window":          {"window_gathered_indices", "residual_twice", "unsorted_indices", "no_weighting", "capacity_off_by_one"},
		"layer-mode-staged":     {"mode_ungated_experts"},
		"layer-mode-integrated": {"mode_ungated_experts"},
	}
	for name, devs := range want {
		c := loadCase(t, name)
		ems := emulated(t, c)
		seen := make(map[string]bool)
		for _, em := range ems {
			if em.reason != "" {
				continue
			}
			seen[em.name] = true
			dc, err := deviantCase(c, em)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := diagnoseWith(c, dc.Candidate(), ems)
			if err != nil {
				t.Fatal(err)
			}
			if !rs[1+indexOf(ems, em)].Distinct {
				continue
			}
			for i, r := range rs {
				self := r.Name == em.name && r.Variant == em.variant
				if r.Match && !self && i > 0 && sameOnCase(t, c, em, ems[i-1]) {
					continue // two deviations this case cannot tell apart
				}
				if r.Match != self {
					t.Errorf("%s, candidate with %s: %s match = %v (%d/%d arrays, worst %s)",
						name, label(DeviationResult{Name: em.name, Variant: em.variant}), label(r), r.Match, r.Matching, r.Total, r.Worst.Name)
				}
			}
		}
		for _, d := range devs {
			if !seen[d] {
				t.Errorf("%s: %s is not emulated", name, d)
			}
			for _, em := range ems {
				if em.name == d && em.reason == "" {
					r, err := judgeDeviation(c, c.Candidate(), em)
					if err != nil {
						t.Fatal(err)
					}
					if !r.Distinct || r.Match {
						t.Errorf("%s: %s distinct = %v, the case's own values match it = %v", name, label(r), r.Distinct, r.Match)
					}
				}
			}
		}
	}
}

// sameOnCase reports whether two emulations give the same values on the
// case, within its tolerances both ways: no candidate of this case can tell
// them apart (capacity_off_by_one and capacity_floor_zero on
// layer-capacity-floor, where 0.29·100 floors to 28 either way).
func sameOnCase(t *testing.T, c *format.Case, a, b emulation) bool {
	t.Helper()
	if b.reason != "" {
		return false
	}
	da, err := deviantCase(c, a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := deviantCase(c, b)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := judge.Compare(da, db.Candidate(), false)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := judge.Compare(db, da.Candidate(), false)
	if err != nil {
		t.Fatal(err)
	}
	return ab.Pass && ba.Pass
}

func indexOf(ems []emulation, em emulation) int {
	for i, e := range ems {
		if e.name == em.name && e.variant == em.variant {
			return i
		}
	}
	return -1
}

// TestDiagnosePerfectCandidate runs Diagnose itself: the case's own values
// match the oracle, and a deviation matches only where this case cannot
// tell it from the oracle (layer-none: with g = 1, no weighting, a
// scaled residual and a weight on the MLP's update alone change nothing).
func TestDiagnosePerfectCandidate(t *testing.T) {
	c := loadCase(t, "layer-none")
	rs, err := Diagnose(c, c.Candidate())
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Name != OracleName || !rs[0].Match || rs[0].Matching != rs[0].Total {
		t.Fatalf("oracle result %+v", rs[0])
	}
	indistinct := map[string]bool{}
	for _, r := range rs[1:] {
		if r.Emulated && r.Match != !r.Distinct {
			t.Errorf("%s: match %v, distinct %v", r.Name, r.Match, r.Distinct)
		}
		if r.Emulated && !r.Distinct {
			indistinct[r.Name] = true
		}
		if !r.Emulated && r.Reason == "" {
			t.Errorf("%s is not emulated and says no reason", r.Name)
		}
	}
	// capacity_floor_zero: int(0.5·8) = 4 is the robust floor too;
	// aux_over_padding: the case has no padding.
	if !indistinct["no_weighting"] || !indistinct["residual_scaled"] || !indistinct["weight_mlp_only"] || !indistinct["capacity_floor_zero"] || !indistinct["aux_over_padding"] || len(indistinct) != 5 {
		t.Errorf("indistinguishable deviations on layer-none: %v, want no_weighting, residual_scaled, weight_mlp_only, capacity_floor_zero and aux_over_padding", indistinct)
	}
}

// TestDiagnoseBadCandidate: bad input is an error, as in Compare.
func TestDiagnoseBadCandidate(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand := c.Candidate()
	delete(cand, "out")
	if _, err := Diagnose(c, cand); err == nil {
		t.Error("a candidate without out: no error")
	}
	cand = c.Candidate()
	cand["weights"].F[2] = math.Inf(1)
	if _, err := Diagnose(c, cand); err == nil {
		t.Error("a candidate with Inf: no error")
	}
	// A case whose manifest and arrays agree on a shape its sizes contradict.
	x := *c.Arrays["input.x"]
	x.Shape = []int{2, 64}
	c.Arrays["input.x"] = &x
	if _, err := Diagnose(c, c.Candidate()); err == nil || !strings.Contains(err.Error(), "input.x") {
		t.Errorf("input.x of shape [2 64]: error %v", err)
	}
}

// TestOracleEmulationReproducesCases: with no deviation the emulation
// machinery (the layer run, the model loop, the decoder) gives back every
// stored array bit for bit, forward values and gradients (the emulation's
// backward passes, diagnose_grad.go, are ref's with the oracle's output),
// so a deviation's arrays differ from the case's only by the deviation.
func TestOracleEmulationReproducesCases(t *testing.T) {
	var none layerDeviation // the oracle
	for _, name := range []string{"layer-mlp-only", "model-every-other", "decode-router"} {
		c := loadCase(t, name)
		var arrays map[string]*format.Array
		var err error
		switch c.Manifest.Kind {
		case format.KindLayer:
			arrays, err = layerArrays(c, layerSpecOf(c), &none)
		case format.KindModel:
			arrays, err = modelArrays(c, modelSpecOf(c), &none)
		case format.KindDecode:
			s := modelSpecOf(c)
			p, in, derr := oracle.ModelDrawOf(c, s)
			if derr != nil {
				t.Fatal(derr)
			}
			arrays, err = decodeArrays(c, s, p, in, decodeVariant{}, expectedArrays(c))
			if a, b := arrays["expected.decode_logits"], c.Arrays["expected.decode_logits"]; a == b {
				t.Fatal("decode_logits not recomputed")
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range c.Manifest.Arrays {
			if info.Role != format.RoleExpected {
				continue
			}
			got, want := arrays[info.Name], c.Arrays[info.Name]
			if got == nil {
				t.Errorf("%s: %s not computed", name, info.Name)
				continue
			}
			for k := range want.F {
				if got.F[k] != want.F[k] {
					t.Errorf("%s: %s%v = %v, stored %v (difference %.3g)", name, info.Name, want.Index(k), got.F[k], want.F[k], got.F[k]-want.F[k])
					break
				}
			}
			for k := range want.I {
				if got.I[k] != want.I[k] {
					t.Errorf("%s: %s%v = %v, stored %v", name, info.Name, want.Index(k), got.I[k], want.I[k])
					break
				}
			}
		}
	}
}

// emulatedGradTol bounds the difference between the oracle emulation's
// finite-difference gradients (layerArraysFD, modelArraysFD) and the
// corpus' analytic ones, relative to max(‖e‖∞, 1): on these cases, whose
// values are of order one, they differ by at most 1e-9
// (docs/tolerances.md).
const emulatedGradTol = 1e-7

// maxAbs is the largest |v| of a.
func maxAbs(a []float64) float64 {
	m := 0.0
	for _, v := range a {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// at returns element [b i j] of a B×S×d array, or [b i] of a B×S one.
func at(a *format.Array, idx ...int) float64 {
	k := 0
	for d, i := range idx {
		k = k*a.Shape[d] + i
	}
	return a.F[k]
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

// TestDeviantCandidate: the exported candidate of a deviation is named by
// Diagnose; an unknown or unemulated deviation is an error.
func TestDeviantCandidate(t *testing.T) {
	c := loadCase(t, "decode-router")
	cand, err := DeviantCandidate(c, "decode_mismatch", "skipped tokens cached")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Match != (r.Variant == "skipped tokens cached") {
			t.Errorf("%s: match %v", label(r), r.Match)
		}
	}
	if _, err := DeviantCandidate(c, "capacity_off_by_one", ""); err == nil {
		t.Error("capacity_off_by_one on a decode case, whose routing is causal: no error")
	}
	if _, err := DeviantCandidate(c, "bogus", ""); err == nil {
		t.Error("an unknown deviation: no error")
	}
}

// TestSharedEmulations: a deviation that computes what the oracle computes
// on a case (capacity_floor_zero on layer-paper, int(0.5·8) = 4) is given
// the case's arrays without recomputation; computed all the same, it gives
// them within the case's tolerances. On layer-capacity-floor it repeats
// capacity_off_by_one (0.29·100 floors to 28 either way) and shares its
// arrays.
func TestSharedEmulations(t *testing.T) {
	c := loadCase(t, "layer-paper")
	s := layerSpecOf(c)
	d, _ := findLayerDeviation("capacity_floor_zero")
	arrays, err := layerArrays(c, s, &d)
	if err != nil {
		t.Fatal(err)
	}
	res, err := judge.Compare(c, (&format.Case{Manifest: c.Manifest, Arrays: arrays}).Candidate(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass {
		t.Errorf("capacity_floor_zero computed on layer-paper differs from the case")
	}
	ems, err := emulate(c, nil, nil) // not the shared cache: its arrays may come from another load of the case
	if err != nil {
		t.Fatal(err)
	}
	em := find(t, ems, "capacity_floor_zero")
	if em.arrays["expected.out"] != c.Arrays["expected.out"] {
		t.Errorf("capacity_floor_zero on layer-paper was recomputed, not taken from the case")
	}
	floor := loadCase(t, "layer-capacity-floor")
	ems = []emulation{{name: "capacity_off_by_one"}, {name: "capacity_floor_zero"}}
	devs := make([]layerDeviation, 2)
	devs[0], _ = findLayerDeviation("capacity_off_by_one")
	devs[1], _ = findLayerDeviation("capacity_floor_zero")
	if err := shareEffective(floor, devs, ems, []spec.Config{*floor.Manifest.Config.Layer}); err != nil {
		t.Fatal(err)
	}
	if ems[0].repeats != 0 || ems[1].repeats != 1 {
		t.Errorf("repeats %d, %d; want capacity_floor_zero to repeat capacity_off_by_one", ems[0].repeats, ems[1].repeats)
	}
}

// TestDecodeWindowConsistent: a model whose routed layers count the window
// in gathered indices decodes, counting it in cache slots, to the logits of
// its own full forward, as a correct model does; the two emulations (the
// layer's regathered block, the decoder fed at cache slots) are made
// independently. And they differ from the oracle's on decode-window.
func TestDecodeWindowConsistent(t *testing.T) {
	c := loadCase(t, "decode-window")
	em := find(t, emulated(t, c), "window_gathered_indices")
	full, dec := em.arrays["expected.logits"], em.arrays["expected.decode_logits"]
	for i := range full.F {
		if math.Abs(full.F[i]-dec.F[i]) > 1e-9 {
			t.Fatalf("logit %d: full forward %v, decoding %v", i, full.F[i], dec.F[i])
		}
	}
	if slices.Equal(full.F, c.Arrays["expected.logits"].F) {
		t.Error("the deviant full forward equals the oracle's: the case shows nothing")
	}
}

func floats(a, b []float64, tol float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

// TestInputGradientShortWay: grad.input.x with the tokens outside the
// selection taken the short way (u_i plus the finite difference of the
// auxiliary loss alone) agrees with the full finite differences of the
// loss, for the oracle and for deviations that change what the auxiliary
// loss reads (a live predictor input, other targets, another selection).
func TestInputGradientShortWay(t *testing.T) {
	for _, tc := range []struct{ name, deviation string }{
		{"layer-router-bce", ""},
		{"layer-router-bce", "targets_first_row"},
		{"layer-predictor", "predictor_no_stopgrad"},
		{"layer-predictor", "predictor_block_output"},
		{"layer-padding", "capacity_off_by_one"},
		{"layer-causal-predictor", "residual_twice"},
		{"layer-router-bce", "gather_first_k"},
	} {
		c := loadCase(t, tc.name)
		s := layerSpecOf(c)
		var d layerDeviation
		if tc.deviation != "" {
			d, _ = findLayerDeviation(tc.deviation)
		}
		grads := make([][]float64, 2)
		for k, skip := range []bool{false, true} {
			dr, err := oracle.LayerDrawOf(c, s)
			if err != nil {
				t.Fatal(err)
			}
			var st layerState
			loss := func() (float64, error) {
				l, err := d.run(s.Config, dr.P, dr.In, &st)
				if err != nil {
					return 0, err
				}
				return oracle.Dot(l.out, dr.U) + l.res.AuxLoss, nil
			}
			if _, err := loss(); err != nil {
				t.Fatal(err)
			}
			if grads[k], err = inputGradient(s, &dr, &d, &st, loss, skip); err != nil {
				t.Fatal(err)
			}
		}
		differ := 0
		for i := range grads[0] {
			if math.Abs(grads[0][i]-grads[1][i]) > 1e-8 {
				t.Fatalf("%s %s: grad.input.x[%d] full %v, short %v", tc.name, tc.deviation, i, grads[0][i], grads[1][i])
			}
			if grads[0][i] != grads[1][i] {
				differ++
			}
		}
		if differ == 0 {
			t.Errorf("%s %s: the short way was not taken", tc.name, tc.deviation)
		}
	}
}

// TestCorpusGradientsAreTheFiniteDifferences: every gradient array of the
// corpus, which the generator takes from ref's analytic backward passes,
// agrees within emulatedGradTol of max(‖e‖∞, 1) with the central
// differences of ref's frozen forward that generated the corpus before
// (the oracle emulation's, for MoDE cases FDGradient of
// MoDEForwardFrozen): the finite differences are the corpus's test.
func TestCorpusGradientsAreTheFiniteDifferences(t *testing.T) {
	if testing.Short() {
		t.Skip("central differences of every case take seconds; -short skips them")
	}
	names, err := format.List("../corpus")
	if err != nil {
		t.Fatal(err)
	}
	var oracle layerDeviation
	worst, where := 0.0, ""
	for _, name := range names {
		c := loadCase(t, name)
		var arrays map[string]*format.Array
		switch c.Manifest.Kind {
		case format.KindLayer:
			arrays, err = layerArraysFD(c, layerSpecOf(c), &oracle)
		case format.KindModel:
			arrays, err = modelArraysFD(c, modelSpecOf(c), &oracle)
		case format.KindMoDE:
			arrays, err = modeFDGradients(c)
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, info := range c.Manifest.Arrays {
			if !strings.HasPrefix(info.Name, "grad.") {
				continue
			}
			got, want := arrays[info.Name], c.Arrays[info.Name]
			if got == nil {
				t.Errorf("%s: %s not computed", name, info.Name)
				continue
			}
			scale := math.Max(1, maxAbs(want.F))
			for k := range want.F {
				d := math.Abs(got.F[k]-want.F[k]) / scale
				if !(d <= emulatedGradTol) {
					t.Errorf("%s: %s%v = %v by finite differences, stored %v (difference %.3g of max(‖e‖∞, 1), bound %.3g)", name, info.Name, want.Index(k), got.F[k], want.F[k], d, emulatedGradTol)
					break
				}
				if d > worst {
					worst, where = d, name+" "+info.Name
				}
			}
		}
	}
	t.Logf("largest difference %.3g of max(‖e‖∞, 1) (%s)", worst, where)
}

// modeFDGradients returns a MoDE case's gradients by central differences
// of ref.MoDEForwardFrozen with the case's decision frozen.
func modeFDGradients(c *format.Case) (map[string]*format.Array, error) {
	s := modeSpecOf(c)
	dr, err := oracle.MoDEDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	res, err := ref.MoDEForward(s.Config, dr.P, dr.X)
	if err != nil {
		return nil, err
	}
	loss := func() (float64, error) {
		r, err := ref.MoDEForwardFrozen(s.Config, dr.P, dr.X, res.Frozen)
		if err != nil {
			return 0, err
		}
		return oracle.Dot(r.Out, dr.U), nil
	}
	arrays := map[string]*format.Array{}
	var gx []float64
	for _, x := range dr.X {
		g, err := ref.FDGradient(loss, x.RawMatrix().Data, ref.FDStep)
		if err != nil {
			return nil, err
		}
		gx = append(gx, g...)
	}
	arrays["grad.input.x"] = format.Float(gx, s.Batch, s.SeqLen, s.Config.Block.D)
	for _, p := range dr.P.Tensors("") {
		g, err := oracle.Gradient(loss, p.Data, p.Shape)
		if err != nil {
			return nil, err
		}
		arrays["grad.param."+p.Name] = g
	}
	return arrays, nil
}

// loadCase reads a case of the committed corpus.
func loadCase(t *testing.T, name string) *format.Case {
	t.Helper()
	c, err := format.Load("../corpus", name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
