package golden

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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
	Worst ArrayResult `json:"worst"`
	// Absent lists the arrays the candidate left out, judged by no result
	// (CaseResult.Absent).
	Absent []string `json:"absent,omitempty"`
	// distance sums, over the arrays outside tolerance, the logarithm of
	// their excess (docs/golden-format.md): how far the candidate is from
	// these values, the combination search's measure.
	distance float64
}

// Diagnose judges a candidate against a case and against the case
// recomputed under every deviation of docs/spec.md §11 that can be
// emulated for the case's kind (docs/golden-format.md, "Diagnosing a failing
// candidate"). The first result is the oracle (Name OracleName); then one
// result per deviation in the order of Deviations (decode_mismatch once per
// variant). Bad input in the candidate (a missing array, a wrong shape or
// dtype, NaN or Inf) is an error, as in Compare.
func Diagnose(c *Case, cand map[string]*Array) ([]DeviationResult, error) {
	return DiagnoseProgress(c, cand, nil)
}

// DiagnoseProgress is Diagnose, calling progress(done, total), when it is
// not nil, with done 0 when the total deviant recomputations of a layer or
// model case start and each time one finishes, one call at a time (decode
// cases take a moment and report none); when combinations are searched,
// one more series of calls for each size of combination, again from done
// 0, counts their recomputations.
func DiagnoseProgress(c *Case, cand map[string]*Array, progress func(done, total int)) ([]DeviationResult, error) {
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
func DiagnoseWithOptions(c *Case, cand map[string]*Array, o DiagnoseOptions) ([]DeviationResult, error) {
	rule := refuseMissing
	if o.AllowMissing {
		rule = skipMissing
	}
	if _, err := compare(c, cand, rule); err != nil {
		return nil, err
	}
	progress := o.Progress
	w := writtenByLayer(c, cand)
	ems, err := emulate(c, w, progress)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	out, err := diagnoseWith(c, cand, ems)
	if err != nil {
		return nil, err
	}
	combos, err := diagnoseCombinations(c, cand, w, out, progress)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return append(out, combos...), nil
}

// combineBeam is how many combinations of each size the combination search
// grows by one more deviation, and maxDeviations the most deviations it
// combines. Each combination is one more deviant recomputation: growing
// combineBeam sets by each of the n deviations the case tells apart costs
// up to combineBeam·n recomputations per size.
const (
	combineBeam   = 3
	maxDeviations = 5
)

// combination is a set of deviation names, in the order of Deviations,
// and the variant of gather_first_k among them ("" or torchTopKVariant).
type combination struct {
	names   []string
	variant string
}

// key names the combination as its result does.
func (s combination) key() string { return resultKey(strings.Join(s.names, "+"), s.variant) }

func resultKey(name, variant string) string { return name + "\x00" + variant }

// diagnoseCombinations is the search for several deviations at once
// (docs/golden-format.md, "Diagnosing a failing candidate"): when neither
// the oracle nor a single deviation explains the candidate, the
// combineBeam deviations that bring it closest (the arrays outside
// tolerance fewer or nearer: a smaller sum of the logarithms of their
// excess), among those that bring it closer at all, are each combined with
// every other deviation the case tells apart; the combineBeam closest
// combinations that are closer than the set they grew from are grown by
// one more, up to maxDeviations. A deviation is thus ranked with the
// others already applied: one that changes the selection makes every
// other deviation alone look as far as the oracle (an integer array
// differs), and one whose effect alone is small (a predictor's
// stop-gradient) may bring the candidate no closer by itself. The search
// stops at the first size with a combination that matches, and returns
// those, after the closest combinations of the smaller sizes; a
// combination's result's Name joins the deviations' names with "+", in the
// order of Deviations.
func diagnoseCombinations(c *Case, cand map[string]*Array, w map[string]written, single []DeviationResult, progress func(done, total int)) ([]DeviationResult, error) {
	oracle := single[0]
	if oracle.Match || c.Manifest.Kind == KindDecode || c.Manifest.Kind == KindMoDE {
		return nil, nil
	}
	var pool, beam []DeviationResult
	for _, r := range single[1:] {
		if r.Match && r.Distinct {
			return nil, nil
		}
		if r.Emulated && r.Distinct && (r.Variant == "" || r.Variant == torchTopKVariant) {
			pool = append(pool, r)
			if r.distance < oracle.distance {
				beam = append(beam, r)
			}
		}
	}
	beam = closest(beam, combineBeam)
	var out []DeviationResult
	seen := map[string]bool{}
	for size := 2; size <= maxDeviations && len(beam) > 0; size++ {
		var sets []combination
		parent := map[string]float64{} // the closest set each grew from
		for _, b := range beam {
			names := strings.Split(b.Name, "+")
			for _, r := range pool {
				if slices.Contains(names, r.Name) {
					continue
				}
				set := combination{inDeviationOrder(append(slices.Clone(names), r.Name)...), cmp.Or(b.Variant, r.Variant)}
				key := set.key()
				if d, ok := parent[key]; !ok || b.distance < d {
					parent[key] = b.distance
				}
				if !seen[key] {
					seen[key] = true
					sets = append(sets, set)
				}
			}
		}
		judged, err := judgeCombinations(c, cand, w, sets, progress)
		if err != nil {
			return nil, err
		}
		var matches, closer []DeviationResult
		for _, r := range judged {
			switch {
			case r.Match:
				matches = append(matches, r)
			case r.distance < parent[resultKey(r.Name, r.Variant)]:
				closer = append(closer, r)
			}
		}
		if len(matches) > 0 {
			return append(out, matches...), nil
		}
		beam = closest(closer, combineBeam)
		out = append(out, beam...)
	}
	return out, nil
}

// closest returns the n results of rs nearest the candidate (smallest
// distance; ties in their order).
func closest(rs []DeviationResult, n int) []DeviationResult {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b DeviationResult) int { return cmp.Compare(a.distance, b.distance) })
	return rs[:min(len(rs), n)]
}

// inDeviationOrder sorts deviation names in the order of Deviations.
func inDeviationOrder(names ...string) []string {
	idx := func(n string) int {
		return slices.IndexFunc(Deviations, func(d Deviation) bool { return d.Name == n })
	}
	slices.SortFunc(names, func(a, b string) int { return idx(a) - idx(b) })
	return names
}

// judgeCombinations emulates each set of deviations at once where they can
// be combined (with what the candidate wrote, w) and judges the candidate
// against it; sets that cannot be combined give no result.
func judgeCombinations(c *Case, cand map[string]*Array, w map[string]written, sets []combination, progress func(done, total int)) ([]DeviationResult, error) {
	var devs []layerDeviation
	var ems []emulation
	for _, set := range sets {
		d, ok := combineVariant(set.names, set.variant)
		if !ok {
			continue
		}
		d.written = w
		devs = append(devs, d)
		ems = append(ems, emulation{name: d.name, variant: set.variant})
	}
	if len(ems) == 0 {
		return nil, nil
	}
	if err := emulateDeviations(c, devs, ems, progress); err != nil {
		return nil, err
	}
	var out []DeviationResult
	for _, em := range ems {
		if em.reason != "" {
			continue
		}
		r, err := judge(c, cand, em)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// diagnoseWith is Diagnose with the emulations already made, on a
// candidate already checked: an array it leaves out is not judged.
func diagnoseWith(c *Case, cand map[string]*Array, ems []emulation) ([]DeviationResult, error) {
	oracle, err := compare(c, cand, skipMissing)
	if err != nil {
		return nil, err
	}
	out := []DeviationResult{summarize(DeviationResult{Name: OracleName, Emulated: true}, oracle)}
	for _, em := range ems {
		r, err := judge(c, cand, em)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
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
func DeviantCandidate(c *Case, name, variant string) (map[string]*Array, error) {
	if strings.Contains(name, "+") {
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
		return candidateOf(dc), nil
	}
	return nil, fmt.Errorf("case %s: no deviation %q (variant %q)", c.Manifest.Name, name, variant)
}

// combinedCandidate is DeviantCandidate for deviations joined with "+",
// gather_first_k among them in variant ("" or torchTopKVariant).
func combinedCandidate(c *Case, name, variant string) (map[string]*Array, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	d, ok := combineVariant(strings.Split(name, "+"), variant)
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
	return candidateOf(dc), nil
}

// emulation is a case's expected arrays recomputed under one deviation, or
// the reason it cannot be.
type emulation struct {
	name, variant string
	// reason is set when the deviation is not emulated for the case.
	reason string
	// arrays maps every expected array name of the manifest to its deviant
	// value.
	arrays map[string]*Array
	// repeats is 1 + the index of an earlier emulation that computes
	// exactly the same arrays on this case (shareEffective); 0 if none.
	repeats int
}

// notEmulated is an emulation that could not be made, and why.
func notEmulated(name, reason string) emulation { return emulation{name: name, reason: reason} }

// emulate recomputes the case under every deviation, by kind, with what
// the candidate wrote (w, nil for none), reporting progress as emulateEach
// does.
func emulate(c *Case, w map[string]written, progress func(done, total int)) ([]emulation, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, err
	}
	switch c.Manifest.Kind {
	case KindLayer:
		return emulateLayerCase(c, w, progress)
	case KindModel:
		return emulateModelCase(c, w, progress)
	case KindDecode:
		return emulateDecodeCase(c)
	case KindMoDE:
		return emulateMoDECase(c, progress)
	}
	return nil, fmt.Errorf("kind %q has no emulation", c.Manifest.Kind)
}

// deviantCase is the case with its expected arrays replaced by an
// emulation's: inputs, parameters, manifest and tolerances stay.
func deviantCase(c *Case, em emulation) (*Case, error) {
	arrays := make(map[string]*Array, len(c.Arrays))
	for name, a := range c.Arrays {
		arrays[name] = a
	}
	for _, info := range c.Manifest.Arrays {
		if info.Role != RoleExpected {
			continue
		}
		a, ok := em.arrays[info.Name]
		if !ok {
			return nil, fmt.Errorf("emulating %s: array %q was not recomputed", em.name, info.Name)
		}
		if !slices.Equal(a.Shape, info.Shape) || a.IsInt() != c.Arrays[info.Name].IsInt() {
			return nil, fmt.Errorf("emulating %s: array %q recomputed as %s %v, the case has %s %v",
				em.name, info.Name, a.DType, a.Shape, info.DType, info.Shape)
		}
		arrays[info.Name] = a
	}
	return &Case{Manifest: c.Manifest, Arrays: arrays}, nil
}

// judge compares the candidate with one emulation.
func judge(c *Case, cand map[string]*Array, em emulation) (DeviationResult, error) {
	r := DeviationResult{Name: em.name, Variant: em.variant, Reason: em.reason}
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
	dv := candidateOf(dc)
	for name := range dv {
		if _, ok := cand[name]; !ok {
			delete(dv, name)
		}
	}
	vs, err := compare(c, dv, skipMissing)
	if err != nil {
		return r, fmt.Errorf("emulating %s: %w", em.name, err)
	}
	r.Distinct = !vs.Pass
	res, err := compare(dc, cand, skipMissing)
	if err != nil {
		return r, err
	}
	return summarize(r, res), nil
}

// summarize fills the match counts and the worst array from a comparison.
func summarize(r DeviationResult, res *CaseResult) DeviationResult {
	r.Match, r.Total, r.Absent = res.Pass, len(res.Arrays), res.Absent
	worst := -1.0
	for _, a := range res.Arrays {
		if a.Status == StatusPass {
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
func Excess(a ArrayResult) float64 {
	if a.Status == StatusMissing {
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
// goroutines, fewer when their memory would pass maxGenMemory
// (parallelEmulations of case c) (each computation owns its copy of the case's parameters and
// inputs, so the results do not depend on the schedule), started by
// descending cost(i), a relative estimate, so that the longest do not come
// last and leave the other cores idle. The first error in list order is
// returned.
// When progress is not nil it is called, one call at a time, with done 0
// before the computations start and as each finishes: done of total.
func emulateEach(c *Case, ems []emulation, progress func(done, total int), cost func(i int) int, compute func(i int) (map[string]*Array, error)) error {
	errs := make([]error, len(ems))
	sem := make(chan struct{}, parallelEmulations(c.Manifest))
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

// candidateOf returns a case's expected arrays under their candidate names.
func candidateOf(c *Case) map[string]*Array {
	cand := make(map[string]*Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == RoleExpected {
			cand[CandidateName(info.Name)] = c.Arrays[info.Name]
		}
	}
	return cand
}

// checkInputShapes checks that the arrays the emulations read have the
// shapes the case's sizes call for (a manifest can list them consistently
// wrong).
func checkInputShapes(c *Case) error {
	cfg := c.Manifest.Config
	bs := []int{cfg.Batch, cfg.SeqLen}
	want := map[string][]int{}
	if c.Manifest.Kind == KindMoDE {
		if cfg.MoDE == nil {
			return fmt.Errorf("a mode case needs config.mode")
		}
		bsd := []int{cfg.Batch, cfg.SeqLen, cfg.MoDE.Block.D}
		want["input.x"], want["upstream.out"] = bsd, bsd
	} else if c.Manifest.Kind == KindLayer {
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
