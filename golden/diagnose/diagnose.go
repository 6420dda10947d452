package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// OracleName is the name of the first result of Diagnose: the candidate
// judged against the case itself.
const OracleName = "oracle"

// DeviationResult is the verdict on a candidate under one deviation of
// docs/spec.md §11: the case recomputed as an implementation with that
// deviation would compute it, and the candidate judged against those values
// with the case's tolerances.
type DeviationResult struct {
	// Name is a deviation name of Deviations, or OracleName.
	Name string `json:"name"`
	// Variant says which form of the deviation was emulated when it has
	// several (decode_mismatch); empty otherwise.
	Variant string `json:"variant,omitempty"`
	// Emulated is false when the deviation cannot be reproduced for this
	// case; Reason then says why.
	Emulated bool   `json:"emulated"`
	Reason   string `json:"reason,omitempty"`
	// Distinct reports that the deviant values differ from the oracle's
	// beyond the case's tolerances, so that this case can tell the deviation
	// apart from a correct implementation. It is false for the oracle.
	Distinct bool `json:"distinct"`
	// Match reports that every array of the candidate is within tolerance of
	// the deviant values; Matching of Total arrays are.
	Match    bool `json:"match"`
	Matching int  `json:"matching"`
	Total    int  `json:"total"`
	// Worst is the array furthest outside its tolerance (or, when all match,
	// closest to leaving it), judged against the deviant values.
	Worst judge.ArrayResult `json:"worst"`
	// Absent lists the arrays the candidate left out, judged by no result
	// (CaseResult.Absent).
	Absent []string `json:"absent,omitempty"`
	// Scale is the α of weight_scaled, when Name has it: fitted to the
	// candidate's arrays (docs/golden-format.md, "A fitted scale"); 0
	// otherwise.
	Scale float64 `json:"scale,omitempty"`
	// distance sums, over the arrays outside tolerance, the logarithm of
	// their excess (docs/golden-format.md): how far the candidate is from
	// these values, the combination search's measure.
	distance float64
	// arrays is the candidate's arrays judged against these values, for
	// the test of a factor (Explain).
	arrays []judge.ArrayResult
	// forward reports that these values differ from the oracle's beyond
	// tolerance on some forward array the candidate has (one not a
	// gradient), for the test of a factor (Explain).
	forward bool
}

// Diagnose judges a candidate against a case and against the case
// recomputed under every deviation of docs/spec.md §11 that can be
// emulated for the case's kind (docs/golden-format.md, "Diagnosing a failing
// candidate"). The first result is the oracle (Name OracleName); then one
// result per deviation in the order of Deviations (decode_mismatch once per
// variant). Bad input in the candidate (a missing array, a wrong shape or
// dtype, NaN or Inf) is an error, as in Compare.
func Diagnose(c *format.Case, cand map[string]*format.Array) ([]DeviationResult, error) {
	return DiagnoseProgress(c, cand, nil)
}

// DiagnoseProgress is Diagnose, calling progress(done, total), when it is
// not nil, with done 0 when the total deviant recomputations of a layer or
// model case start and each time one finishes, one call at a time (decode
// cases take a moment and report none); when combinations are searched,
// one more series of calls for each size of combination, again from done
// 0, counts their recomputations, and in a layer case where none of a
// size matches, one more counts the gradients of the sets refused before
// them (the combination search's refusal).
func DiagnoseProgress(c *format.Case, cand map[string]*format.Array, progress func(done, total int)) ([]DeviationResult, error) {
	return DiagnoseWithOptions(c, cand, DiagnoseOptions{Progress: progress})
}

// DiagnoseOptions are the options of DiagnoseWithOptions.
type DiagnoseOptions struct {
	// AllowMissing judges a candidate that leaves out arrays the case
	// requires on the arrays it has: the others are listed in each
	// result's Absent, judged neither way, instead of being bad input.
	AllowMissing bool
	// Progress is DiagnoseProgress's progress; nil for none.
	Progress func(done, total int)
}

// DiagnoseWithOptions is Diagnose with options.
func DiagnoseWithOptions(c *format.Case, cand map[string]*format.Array, o DiagnoseOptions) ([]DeviationResult, error) {
	rule := judge.RefuseMissing
	if o.AllowMissing {
		rule = judge.SkipMissing
	}
	if _, err := judge.CompareWith(c, cand, rule); err != nil {
		return nil, err
	}
	progress := o.Progress
	w := writtenByLayer(c, cand)
	var out []DeviationResult
	var err error
	forward := new(sharedForward) // ref's forward of a layer case, for every emulation
	if c.Manifest.Kind == format.KindLayer {
		out, err = diagnoseLayer(c, cand, w, progress, forward)
	} else {
		var ems []emulation
		if ems, err = emulate(c, w, progress); err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
		out, err = diagnoseWith(c, cand, ems)
	}
	if err != nil {
		return nil, err
	}
	combos, err := diagnoseCombinations(c, cand, w, out, progress, forward)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return append(out, combos...), nil
}

// diagnoseWith is Diagnose with the emulations already made, on a
// candidate already checked: an array it leaves out is not judged.
func diagnoseWith(c *format.Case, cand map[string]*format.Array, ems []emulation) ([]DeviationResult, error) {
	oracle, err := judge.CompareWith(c, cand, judge.SkipMissing)
	if err != nil {
		return nil, err
	}
	out := []DeviationResult{summarize(DeviationResult{Name: OracleName, Emulated: true}, oracle)}
	for _, em := range ems {
		r, err := judgeDeviation(c, cand, em)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// diagnoseLayer is diagnoseWith of a layer case, each emulation judged as
// soon as it is computed (emulateLayer's settle) and its arrays then
// dropped, with what the candidate wrote (w), from ref's forward
// computed once (forward); an emulation that is the oracle holds the
// case's own arrays and is judged on them.
func diagnoseLayer(c *format.Case, cand map[string]*format.Array, w map[string]written, progress func(done, total int), forward *sharedForward) ([]DeviationResult, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	var mu sync.Mutex
	judged := make(map[int]DeviationResult)
	settle := func(i int, em emulation, _ bool) error {
		r, err := judgeDeviation(c, cand, em)
		mu.Lock()
		judged[i] = r
		mu.Unlock()
		return err
	}
	ems, _, err := emulateLayer(c, w, progress, false, settle, forward)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	oracle, err := judge.CompareWith(c, cand, judge.SkipMissing)
	if err != nil {
		return nil, err
	}
	out := []DeviationResult{summarize(DeviationResult{Name: OracleName, Emulated: true}, oracle)}
	for i, em := range ems {
		if em.reason != "" {
			out = append(out, DeviationResult{Name: em.name, Variant: em.variant, Reason: em.reason})
			continue
		}
		if em.arrays != nil { // the oracle's own arrays (shareEffective), not computed
			r, err := judgeDeviation(c, cand, em)
			if err != nil {
				return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
			}
			out = append(out, r)
			continue
		}
		if em.repeats > 0 {
			i = em.repeats - 1
		}
		r := judged[i]
		r.Name, r.Variant = em.name, em.variant
		out = append(out, r)
	}
	return out, nil
}

// DeviantCandidate returns the candidate an implementation with deviation
// name (and, for decode_mismatch, the named variant; "" is the first) would
// write for the case: every array a candidate provides, under its candidate
// name. name may join several layer deviations with "+" (as
// diagnose names a combination). It is an error if the deviation is not
// emulated for the case.
func DeviantCandidate(c *format.Case, name, variant string) (map[string]*format.Array, error) {
	if strings.Contains(name, "+") || slices.Contains(strings.Split(name, "+"), "weight_scaled") && variant != "" {
		return combinedCandidate(c, name, variant)
	}
	ems, err := emulate(c, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	for _, em := range ems {
		if em.name != name || (variant != "" && em.variant != variant) {
			continue
		}
		if em.reason != "" {
			return nil, fmt.Errorf("case %s: %s is not emulated: %s", c.Manifest.Name, name, em.reason)
		}
		dc, err := deviantCase(c, em)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
		return dc.Candidate(), nil
	}
	return nil, fmt.Errorf("case %s: no deviation %q (variant %q)", c.Manifest.Name, name, variant)
}

// combinedCandidate is DeviantCandidate for deviations joined with "+",
// gather_first_k among them in variant ("" or torchTopKVariant).
func combinedCandidate(c *format.Case, name, variant string) (map[string]*format.Array, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	names := strings.Split(name, "+")
	var alpha float64
	if slices.Contains(names, "weight_scaled") && variant != "" {
		a, err := parseScale(variant)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
		alpha, variant = a, ""
	}
	d, ok := combineVariant(names, variant)
	if c.Manifest.Kind == format.KindDecode {
		d, ok = combineDecode(names, variant)
	}
	d.scale = alpha
	if !ok {
		return nil, fmt.Errorf("case %s: deviations %s (variant %q) cannot be combined", c.Manifest.Name, name, variant)
	}
	ems := []emulation{{name: name, variant: variant}}
	if err := emulateDeviations(c, []layerDeviation{d}, ems, nil); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	if ems[0].reason != "" {
		return nil, fmt.Errorf("case %s: %s is not emulated: %s", c.Manifest.Name, name, ems[0].reason)
	}
	dc, err := deviantCase(c, ems[0])
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return dc.Candidate(), nil
}

// emulation is a case's expected arrays recomputed under one deviation, or
// the reason it cannot be.
type emulation struct {
	name, variant string
	// reason is set when the deviation is not emulated for the case.
	reason string
	// arrays maps every expected array name of the manifest to its deviant
	// value.
	arrays map[string]*format.Array
	// repeats is 1 + the index of an earlier emulation that computes
	// exactly the same arrays on this case (shareEffective); 0 if none.
	repeats int
	// scale is weight_scaled's α where the deviation has it; 0 otherwise.
	scale float64
}

// notEmulated is an emulation that could not be made, and why.
func notEmulated(name, reason string) emulation { return emulation{name: name, reason: reason} }

// emulate recomputes the case under every deviation, by kind, with what
// the candidate wrote (w, nil for none), reporting progress as emulateEach
// does.
func emulate(c *format.Case, w map[string]written, progress func(done, total int)) ([]emulation, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, err
	}
	switch c.Manifest.Kind {
	case format.KindLayer:
		return emulateLayerCase(c, w, progress)
	case format.KindModel:
		return emulateModelCase(c, w, progress)
	case format.KindDecode:
		return emulateDecodeCase(c)
	case format.KindMoDE:
		return emulateMoDECase(c, progress)
	}
	return nil, fmt.Errorf("kind %q has no emulation", c.Manifest.Kind)
}

// deviantCase is the case with its expected arrays replaced by an
// emulation's: inputs, parameters, manifest and tolerances stay.
func deviantCase(c *format.Case, em emulation) (*format.Case, error) {
	arrays := make(map[string]*format.Array, len(c.Arrays))
	for name, a := range c.Arrays {
		arrays[name] = a
	}
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		a, ok := em.arrays[info.Name]
		if !ok {
			return nil, fmt.Errorf("emulating %s: array %q was not recomputed", em.name, info.Name)
		}
		if !(slices.Equal(a.Shape, info.Shape) || widerSelection(info, a)) || a.IsInt() != c.Arrays[info.Name].IsInt() {
			return nil, fmt.Errorf("emulating %s: array %q recomputed as %s %v, the case has %s %v",
				em.name, info.Name, a.DType, a.Shape, info.DType, info.Shape)
		}
		arrays[info.Name] = a
	}
	return &format.Case{Manifest: c.Manifest, Arrays: arrays}, nil
}

// deviantValues is a deviant case's expected arrays under their candidate
// names, as Case.Candidate gives them but not copied: judging reads them
// only, and at production shapes each copy is the case's size.
func deviantValues(dc *format.Case) map[string]*format.Array {
	cand := make(map[string]*format.Array)
	for _, info := range dc.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			cand[format.CandidateName(info.Name)] = dc.Arrays[info.Name]
		}
	}
	return cand
}

// widerSelection reports whether a is a deviant list of selected
// positions wider than the case's array info (selectedLike): as many rows,
// more columns.
func widerSelection(info format.ArrayInfo, a *format.Array) bool {
	return strings.HasSuffix(info.Name, "selected") && a.IsInt() && len(a.Shape) == 2 && len(info.Shape) == 2 &&
		a.Shape[0] == info.Shape[0] && a.Shape[1] > info.Shape[1]
}

// judge compares the candidate with one emulation.
func judgeDeviation(c *format.Case, cand map[string]*format.Array, em emulation) (DeviationResult, error) {
	r := DeviationResult{Name: em.name, Variant: em.variant, Reason: em.reason, Scale: em.scale}
	if em.reason != "" {
		return r, nil
	}
	r.Emulated = true
	dc, err := deviantCase(c, em)
	if err != nil {
		return r, err
	}
	// The deviant values themselves, judged as a candidate against the case
	// on the arrays the candidate has, tell whether the case can see the
	// deviation at all through this candidate.
	dv := deviantValues(dc)
	for name := range dv {
		if _, ok := cand[name]; !ok {
			delete(dv, name)
		}
	}
	vs, err := judge.CompareWith(c, dv, judge.SkipMissing)
	if err != nil {
		return r, fmt.Errorf("emulating %s: %w", em.name, err)
	}
	r.Distinct = !vs.Pass
	for _, a := range vs.Arrays {
		if a.Status != judge.StatusPass && forwardArray(a.Name) {
			r.forward = true
		}
	}
	res, err := judge.CompareWith(dc, cand, judge.SkipMissing)
	if err != nil {
		return r, err
	}
	return summarize(r, res), nil
}

// summarize fills the match counts and the worst array from a comparison.
func summarize(r DeviationResult, res *judge.CaseResult) DeviationResult {
	r.Match, r.Total, r.Absent, r.arrays = res.Pass, len(res.Arrays), res.Absent, res.Arrays
	worst := -1.0
	for _, a := range res.Arrays {
		if a.Status == judge.StatusPass {
			r.Matching++
		}
		e := Excess(a)
		if e > worst {
			worst, r.Worst = e, a
		}
		if e > 1 {
			r.distance += math.Log(min(e, maxExcess))
		}
	}
	return r
}

// maxExcess caps an array's excess in DeviationResult.distance, so that an
// integer array that differs (infinite excess) counts as a large finite
// one.
const maxExcess = 1e12

// Excess is how far an array's worst element is from its expected value, in
// units of the tolerance there: above 1 the array fails. An integer array
// that differs has infinite excess.
func Excess(a judge.ArrayResult) float64 {
	if a.Status == judge.StatusMissing {
		return math.Inf(1)
	}
	d := math.Abs(a.Got - a.Want)
	bound := a.Tolerance.ATol + float64(a.Tolerance.RTol*math.Abs(a.Want))
	switch {
	case d == 0:
		return 0
	case bound == 0:
		return math.Inf(1)
	}
	return d / bound
}

// emulateEach fills ems[i].arrays by compute(i) for every emulation that has
// no reason not to be made and no arrays yet, on up to GOMAXPROCS
// goroutines, fewer when their memory would pass format.MaxGenMemory
// (format.ParallelEmulations of case c) (each computation owns its copy of the case's parameters and
// inputs, so the results do not depend on the schedule), started by
// descending cost(i), a relative estimate, so that the longest do not come
// last and leave the other cores idle. The first error in list order is
// returned.
// When progress is not nil it is called, one call at a time, with done 0
// before the computations start and as each finishes: done of total.
func emulateEach(c *format.Case, ems []emulation, progress func(done, total int), cost func(i int) int, compute func(i int) (map[string]*format.Array, error)) error {
	errs := make([]error, len(ems))
	sem := make(chan struct{}, format.ParallelEmulations(c.Manifest))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, 0
	for i := range ems {
		if ems[i].reason == "" && ems[i].arrays == nil {
			total++
		}
	}
	if progress != nil {
		progress(0, total)
	}
	order := make([]int, len(ems))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cost(b) - cost(a) })
	for _, i := range order {
		if ems[i].reason != "" || ems[i].arrays != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ems[i].arrays, errs[i] = compute(i)
			if progress != nil {
				mu.Lock()
				done++
				progress(done, total)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("emulating %s: %w", ems[i].name, err)
		}
	}
	return nil
}

// checkInputShapes checks that the arrays the emulations read have the
// shapes the case's sizes call for (a manifest can list them consistently
// wrong).
func checkInputShapes(c *format.Case) error {
	cfg := c.Manifest.Config
	bs := []int{cfg.Batch, cfg.SeqLen}
	want := map[string][]int{}
	if c.Manifest.Kind == format.KindMoDE {
		if cfg.MoDE == nil {
			return fmt.Errorf("a mode case needs config.mode")
		}
		bsd := []int{cfg.Batch, cfg.SeqLen, cfg.MoDE.Block.D}
		want["input.x"], want["upstream.out"] = bsd, bsd
	} else if c.Manifest.Kind == format.KindLayer {
		if cfg.Layer == nil {
			return fmt.Errorf("a layer case needs config.layer")
		}
		bsd := []int{cfg.Batch, cfg.SeqLen, cfg.Layer.Block.D}
		want["input.x"], want["upstream.out"], want["input.noise"], want["input.jitter"] = bsd, bsd, bs, bs
	} else {
		want["input.tokens"], want["input.targets"] = bs, bs
		for l := range cfg.Layers {
			want[fmt.Sprintf("input.noise.L%d", l)], want[fmt.Sprintf("input.jitter.L%d", l)] = bs, bs
		}
	}
	for name, shape := range want {
		if a, ok := c.Arrays[name]; ok && !slices.Equal(a.Shape, shape) {
			return fmt.Errorf("array %q has shape %v, the configuration needs %v", name, a.Shape, shape)
		}
	}
	return nil
}
