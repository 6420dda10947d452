package diagnose

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/spec"
)

// The combination search: when no single deviation matches a candidate,
// Diagnose combines the deviations closest to it with every other one, then
// the closest combinations with one more, up to maxDeviations
// (diagnoseCombinations); combineNames defines the deviant layer that has
// several deviations at once.

// combineBeam is how many combinations of each size the combination search
// grows by one more deviation, and maxDeviations the most deviations it
// combines. Each combination is one more deviant recomputation: growing
// combineBeam sets by each of the n deviations the case tells apart costs
// up to combineBeam·n recomputations per size.
const (
	combineBeam   = 3
	maxDeviations = 5
)

// combineNames is the deviation that has every named one at once: its name
// joins theirs with "+". It is false when a name has no layer emulation or
// two of them change the same thing (the capacity, the predictor's input,
// the output formula, the tokens the block runs on and their order, the
// weighting of the update).
func combineNames(names []string) (layerDeviation, bool) {
	var c layerDeviation
	var skips []func(spec.Config) string
	for _, n := range names {
		d, ok := findLayerDeviation(n)
		if !ok {
			return c, false
		}
		if (d.capacity != capacityExact && c.capacity != capacityExact) ||
			(d.feed != feedFrozenInput && c.feed != feedFrozenInput) ||
			(d.output != nil && c.output != nil) {
			return c, false
		}
		if d.capacity != capacityExact {
			c.capacity = d.capacity
		}
		if d.feed != feedFrozenInput {
			c.feed = d.feed
		}
		if d.output != nil {
			c.output = d.output
		}
		c.scoreOrder = c.scoreOrder || d.scoreOrder
		c.windowByIndex = c.windowByIndex || d.windowByIndex
		c.ropeAtIndex = c.ropeAtIndex || d.ropeAtIndex
		c.targetsFirstRow = c.targetsFirstRow || d.targetsFirstRow
		c.noCausalMask = c.noCausalMask || d.noCausalMask
		c.weightMLPOnly = c.weightMLPOnly || d.weightMLPOnly
		c.firstK = c.firstK || d.firstK
		c.sharedRouter = c.sharedRouter || d.sharedRouter
		c.tanhGate = c.tanhGate || d.tanhGate
		c.rowSoftmax = c.rowSoftmax || d.rowSoftmax
		c.scaleSkipped = c.scaleSkipped || d.scaleSkipped
		c.auxOverPadding = c.auxOverPadding || d.auxOverPadding
		c.swapQK = c.swapQK || d.swapQK
		c.scaled = c.scaled || d.scaled
		c.routerNormed = c.routerNormed || d.routerNormed
		if d.skip != nil {
			skips = append(skips, d.skip)
		}
	}
	if c.noCausalMask && (c.scoreOrder || c.windowByIndex || c.ropeAtIndex || c.firstK) {
		return c, false // the unmasked block feeds its tokens its own way
	}
	if c.scoreOrder && c.firstK {
		return c, false // both say which tokens the block runs on, in which order
	}
	if c.weightMLPOnly && (slices.Contains(names, "residual_scaled") || slices.Contains(names, "no_weighting")) {
		return c, false // their outputs say how the whole update is weighted
	}
	if (c.tanhGate || c.rowSoftmax) && (c.firstK || slices.Contains(names, "no_weighting")) || c.tanhGate && c.rowSoftmax {
		return c, false // each says which weight multiplies which update
	}
	if c.scaled && (c.tanhGate || c.rowSoftmax || slices.Contains(names, "no_weighting") || slices.Contains(names, "ste_m_plus_1")) {
		return c, false // each says what the weight is, or how it is applied
	}
	if c.routerNormed && (c.capacity != capacityExact || c.scoreOrder || c.firstK || c.feed == feedOutput || slices.Contains(names, "ste_m_plus_1")) {
		return c, false // each reads ref's router weights, not N1(x)'s, where the emulation decides
	}
	if c.scaleSkipped && c.firstK {
		return c, false // the block runs on other tokens than the selected ones
	}
	c.name = strings.Join(names, "+")
	c.skip = func(cfg spec.Config) string {
		for _, skip := range skips {
			if why := skip(cfg); why != "" {
				return why
			}
		}
		return ""
	}
	return c, true
}

// combineVariant is combineNames with gather_first_k in variant: "" or
// torchTopKVariant, which only a set holding gather_first_k can have.
func combineVariant(names []string, variant string) (layerDeviation, bool) {
	d, ok := combineNames(names)
	switch {
	case !ok || variant == "":
		return d, ok
	case variant != torchTopKVariant || !d.firstK:
		return d, false
	}
	d.torchTopK = true
	return d, true
}

// withTorchTopK adds, after gather_first_k where it is emulated, its
// variant with top-k's order as torch.topk(sorted=False) returns it on CPU
// (torchTopKVariant), for a candidate whose multipliers do not show the
// order (a model's, or one that leaves them out): where they show it, both
// take it from them.
func withTorchTopK(ems []emulation, devs []layerDeviation) ([]emulation, []layerDeviation) {
	i := slices.IndexFunc(ems, func(em emulation) bool { return em.name == "gather_first_k" && em.reason == "" })
	if i < 0 {
		return ems, devs
	}
	d := devs[i]
	d.torchTopK = true
	return slices.Insert(ems, i+1, emulation{name: ems[i].name, variant: torchTopKVariant}), slices.Insert(devs, i+1, d)
}

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
// order of Deviations. In a layer case every combination starts from
// ref's forward computed once (forward; nil, once for each size).
//
// In a model or decode case, where no combination matches, the search runs
// again ranked by where the candidate first departs (byDeparture): an
// earlier layer's deviations applied in part change a later layer's
// selection, so that every subset of them is further by the sum than a
// single one, though each brings the later layer's router weights nearer.
// Only the matches of that second search are added to the results.
func diagnoseCombinations(c *format.Case, cand map[string]*format.Array, w map[string]written, single []DeviationResult, progress func(done, total int), forward *sharedForward) ([]DeviationResult, error) {
	oracle := single[0]
	if oracle.Match || c.Manifest.Kind == format.KindMoDE {
		return nil, nil
	}
	s := &combinationSearch{c: c, cand: cand, w: w, progress: progress, forward: forward, judged: map[string]*DeviationResult{}}
	for _, r := range single[1:] {
		if r.Match && r.Distinct {
			return nil, nil
		}
		if r.Emulated && r.Distinct && (r.Variant == "" || r.Variant == torchTopKVariant || r.Name == "decode_mismatch") {
			s.pool = append(s.pool, r)
		}
	}
	if forward != nil {
		forward.sharePasses = true
	}
	out, matches, err := s.grow(oracle, byDistance)
	if err != nil || len(matches) > 0 || (c.Manifest.Kind != format.KindModel && c.Manifest.Kind != format.KindDecode) {
		return append(out, matches...), err
	}
	_, matches, err = s.grow(oracle, byDeparture(c))
	return append(out, matches...), err
}

// combinationSearch is the state diagnoseCombinations' searches share: the
// case, the candidate and what it wrote, ref's shared forward (layer
// cases), the single deviations combined (pool), and every set judged, by
// its key (nil for one that cannot be combined), so that the second search
// judges no set again.
type combinationSearch struct {
	c        *format.Case
	cand     map[string]*format.Array
	w        map[string]written
	progress func(done, total int)
	forward  *sharedForward
	pool     []DeviationResult
	judged   map[string]*DeviationResult
}

// grow is one greedy search ranked by compare (negative when its first
// argument brings the candidate closer): the closest combinations of each
// size it grew, and the matches of the first size that has one.
func (s *combinationSearch) grow(oracle DeviationResult, compare func(a, b DeviationResult) int) (out, matches []DeviationResult, err error) {
	var beam []DeviationResult
	for _, r := range s.pool {
		if compare(r, oracle) < 0 {
			beam = append(beam, r)
		}
	}
	beam = closest(beam, combineBeam, compare)
	seen := map[string]bool{}
	for size := 2; size <= maxDeviations && len(beam) > 0; size++ {
		var sets []combination
		parent := map[string]DeviationResult{} // the closest set each grew from
		for _, b := range beam {
			names := strings.Split(b.Name, "+")
			for _, r := range s.pool {
				if slices.Contains(names, r.Name) {
					continue
				}
				set := combination{inDeviationOrder(append(slices.Clone(names), r.Name)...), cmp.Or(b.Variant, r.Variant)}
				key := set.key()
				if p, ok := parent[key]; !ok || compare(b, p) < 0 {
					parent[key] = b
				}
				if !seen[key] {
					seen[key] = true
					sets = append(sets, set)
				}
			}
		}
		judged, err := s.judge(sets)
		if err != nil {
			return nil, nil, err
		}
		var closer []DeviationResult
		for _, r := range judged {
			switch {
			case r.Match:
				matches = append(matches, r)
			case compare(r, parent[resultKey(r.Name, r.Variant)]) < 0:
				closer = append(closer, r)
			}
		}
		if len(matches) > 0 {
			return out, matches, nil
		}
		beam = closest(closer, combineBeam, compare)
		out = append(out, beam...)
	}
	return out, nil, nil
}

// judge is judgeCombinations on the sets not judged before: the results of
// sets that can be combined, in their order. In a layer case a set whose
// forward arrays the candidate departs from cannot match, and its
// gradients are computed only when no set matches (judgeCombinations'
// refusal): when one does, the search ends there and reports the matches
// alone, and the others' results are left out.
func (s *combinationSearch) judge(sets []combination) ([]DeviationResult, error) {
	var missing []combination
	for _, set := range sets {
		if _, ok := s.judged[set.key()]; !ok {
			missing = append(missing, set)
			s.judged[set.key()] = nil
		}
	}
	judged, refused, err := judgeCombinations(s.c, s.cand, s.w, missing, s.progress, s.forward, refuseSets)
	if err != nil {
		return nil, err
	}
	if len(refused) > 0 && !slices.ContainsFunc(judged, func(r DeviationResult) bool { return r.Match }) {
		// No set matches: the search ranks them all, by every array.
		again, _, err := judgeCombinations(s.c, s.cand, s.w, refused, s.progress, s.forward, false)
		if err != nil {
			return nil, err
		}
		judged = append(judged, again...)
	}
	for _, r := range judged {
		s.judged[resultKey(r.Name, r.Variant)] = &r
	}
	var out []DeviationResult
	for _, set := range sets {
		if r := s.judged[set.key()]; r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// byDistance ranks results by distance: the sum of the logarithms of the
// excess of the arrays outside tolerance.
func byDistance(a, b DeviationResult) int { return cmp.Compare(a.distance, b.distance) }

// byDeparture ranks results by where the candidate first departs from them
// in the order case c computes its arrays: the later the closer, and at the
// same array, the smaller its excess.
func byDeparture(c *format.Case) func(a, b DeviationResult) int {
	type departure struct {
		right  int     // the arrays before the first outside tolerance
		excess float64 // that array's excess
	}
	memo := map[string]departure{}
	of := func(r DeviationResult) departure {
		key := resultKey(r.Name, r.Variant)
		if d, ok := memo[key]; ok {
			return d
		}
		arrays := judge.InComputeOrder(c, r.arrays)
		d := departure{right: len(arrays)}
		if i := slices.IndexFunc(arrays, func(a judge.ArrayResult) bool { return a.Status != judge.StatusPass }); i >= 0 {
			d = departure{i, Excess(arrays[i])}
		}
		memo[key] = d
		return d
	}
	return func(a, b DeviationResult) int {
		da, db := of(a), of(b)
		return cmp.Or(cmp.Compare(db.right, da.right), cmp.Compare(da.excess, db.excess))
	}
}

// closest returns the n results of rs nearest the candidate by compare
// (ties in their order).
func closest(rs []DeviationResult, n int, compare func(a, b DeviationResult) int) []DeviationResult {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, compare)
	return rs[:min(len(rs), n)]
}

// inDeviationOrder sorts deviation names in the order of Deviations.
func inDeviationOrder(names ...string) []string {
	idx := func(n string) int {
		return slices.IndexFunc(format.Deviations, func(d format.Deviation) bool { return d.Name == n })
	}
	slices.SortFunc(names, func(a, b string) int { return idx(a) - idx(b) })
	return names
}

// refuseSets turns on the combination search's refusal (judge); only
// TestRefusalChangesNoResult turns it off, to compare.
var refuseSets = true

// judgeCombinations emulates each set of deviations at once where they can
// be combined (with what the candidate wrote, w; in a layer case from
// ref's forward, forward, as emulateSettled) and judges the candidate
// against it; sets that cannot be combined give no result. A layer case's
// emulations are judged as they finish and their arrays dropped; with
// refuse, a set whose forward arrays the candidate already departs from
// (departsOn), which therefore cannot match, is refused before its
// gradients are computed: it gives no result and is listed in refused.
func judgeCombinations(c *format.Case, cand map[string]*format.Array, w map[string]written, sets []combination, progress func(done, total int), forward *sharedForward, refuse bool) (out []DeviationResult, refused []combination, err error) {
	var devs []layerDeviation
	var ems []emulation
	var of []combination // the set of each emulation
	for _, set := range sets {
		d, ok := combineVariant(set.names, set.variant)
		if c.Manifest.Kind == format.KindDecode {
			d, ok = combineDecode(set.names, set.variant)
		}
		if !ok {
			continue
		}
		d.written = w
		if refuse && c.Manifest.Kind == format.KindLayer {
			d.caught = &forwardCatch{cand: cand, c: c}
		}
		devs = append(devs, d)
		ems = append(ems, emulation{name: d.name, variant: set.variant})
		of = append(of, set)
	}
	if len(ems) == 0 {
		return nil, nil, nil
	}
	var settle settleFunc
	var mu sync.Mutex
	judged := make(map[int]DeviationResult)
	departs := make(map[int]bool)
	if c.Manifest.Kind == format.KindLayer {
		settle = func(i int, em emulation, byForward bool) error {
			if byForward {
				mu.Lock()
				departs[i] = true
				mu.Unlock()
				return nil
			}
			r, err := judgeDeviation(c, cand, em)
			mu.Lock()
			judged[i] = r
			mu.Unlock()
			return err
		}
	}
	if err := emulateSettled(c, devs, ems, progress, settle, forward); err != nil {
		return nil, nil, err
	}
	for i, em := range ems {
		if em.reason != "" {
			continue
		}
		if settle != nil && em.arrays == nil { // judged as it finished
			j := i
			if em.repeats > 0 {
				j = em.repeats - 1
			}
			if departs[j] {
				refused = append(refused, of[i])
				continue
			}
			r := judged[j]
			r.Name, r.Variant, r.Scale = em.name, em.variant, em.scale
			out = append(out, r)
			continue
		}
		r, err := judgeDeviation(c, cand, em)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, r)
	}
	return out, refused, nil
}
