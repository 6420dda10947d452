package diagnose

import (
	"cmp"
	"slices"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// Partial explanations (docs/golden-format.md, "Named deviations and a
// remainder"): when no emulated deviation or combination matches a
// candidate, each one the search judged is tested as a factor of it. A set
// P of deviations is present when applying it to the truth moves arrays
// onto the candidate's (they fail the oracle and match P's emulation),
// among them one of values (not a selection or a 0/1 mask, which an
// unnamed bug can reproduce by chance), moves none away from it (no array
// that matches the oracle fails P's emulation: P would predict a change
// the candidate does not have), and each deviation D of P is needed: some
// array P moves onto the candidate's, again one of values, fails the
// emulation of P without D. What P leaves outside tolerance is the
// remainder, an unnamed bug, whose first stage is reported.

// Partial is the deviations a candidate has besides a remainder no named
// deviation explains.
type Partial struct {
	// Present lists the deviations found present, in the order of
	// Deviations; Variant is gather_first_k's among them ("" or torch's
	// CPU order).
	Present []string `json:"present"`
	Variant string   `json:"variant,omitempty"`
	// Scale is weight_scaled's fitted α when it is present; 0 otherwise.
	Scale float64 `json:"scale,omitempty"`
	// Explained lists the arrays the deviations move onto the candidate's:
	// outside tolerance of the oracle, within it of the deviant values, in
	// the case's order.
	Explained []string `json:"explained"`
	// Remainder is where the candidate first departs from the truth with
	// the present deviations applied, in the order the layers compute.
	Remainder *judge.Departure `json:"remainder"`
}

// Explain finds the deviations a candidate has besides a remainder, from
// the results of DiagnoseWithOptions on it (docs/golden-format.md, "Named
// deviations and a remainder"). It returns nil when the oracle, a
// deviation or a combination matches, when the case is not a layer or
// model case, and when no set of deviations passes the test of a factor:
// it never names a deviation whose effect the candidate does not show.
func Explain(c *format.Case, cand map[string]*format.Array, results []DeviationResult) (*Partial, error) {
	if len(results) == 0 || results[0].Match || (c.Manifest.Kind != format.KindLayer && c.Manifest.Kind != format.KindModel) {
		return nil, nil
	}
	byKey := map[string]DeviationResult{resultKey("", ""): results[0]}
	var sets []DeviationResult
	for _, r := range results[1:] {
		if r.Match && r.Distinct {
			return nil, nil
		}
		if !r.Emulated || !r.Distinct || (r.Variant != "" && r.Variant != torchTopKVariant) {
			continue
		}
		byKey[resultKey(r.Name, r.Variant)] = r
		sets = append(sets, r)
	}
	// The sets that move arrays onto the candidate's and none away; only
	// theirs need the sets without one of their deviations judged.
	oracle := passing(results[0])
	var moving []DeviationResult
	explainedBy := map[string][]string{}
	for _, r := range sets {
		if explained, ok := moves(oracle, r); ok {
			moving = append(moving, r)
			explainedBy[resultKey(r.Name, r.Variant)] = explained
		}
	}
	w := writtenByLayer(c, cand)
	if err := judgeWithout(c, cand, w, moving, byKey); err != nil {
		return nil, err
	}
	var best *Partial
	var bestDistance float64
	for _, r := range moving {
		explained := explainedBy[resultKey(r.Name, r.Variant)]
		if !needed(r, explained, byKey) {
			continue
		}
		p := &Partial{Present: strings.Split(r.Name, "+"), Explained: explained, Scale: r.Scale}
		if slices.Contains(p.Present, "gather_first_k") {
			p.Variant = r.Variant
		}
		if best == nil || cmp.Or(cmp.Compare(len(p.Explained), len(best.Explained)), cmp.Compare(bestDistance, r.distance)) > 0 {
			best, bestDistance = p, r.distance
		}
	}
	if best == nil {
		return nil, nil
	}
	stage, err := remainder(c, cand, w, best)
	if err != nil {
		return nil, err
	}
	best.Remainder = stage
	return best, nil
}

// moves is the first part of the test of a factor on the result r of a
// set of deviations: the arrays it moves onto the candidate's, and whether
// among them is one of values, none is moved away and some array remains
// (oracle holds the arrays within tolerance of the oracle); and where the
// set changes some forward array (r.forward), one of the arrays of values
// it moves onto the candidate's is a forward one.
func moves(oracle map[string]bool, r DeviationResult) ([]string, bool) {
	var explained []string
	for _, a := range r.arrays {
		o, judged := oracle[a.Name]
		pass := a.Status == judge.StatusPass
		switch {
		case !judged:
		case o && !pass:
			return nil, false // a change the candidate does not have
		case !o && pass:
			explained = append(explained, a.Name)
		}
	}
	if len(explained) == len(r.arrays) || !slices.ContainsFunc(explained, valueArray) {
		return nil, false
	}
	if r.forward && !slices.ContainsFunc(explained, func(a string) bool { return valueArray(a) && forwardArray(a) }) {
		// A set that changes the forward and is seen only in gradients:
		// an unnamed bug elsewhere can take the same gradient away (a
		// router detached from the loss looks like no_weighting there).
		return nil, false
	}
	return explained, true
}

// forwardArray reports whether a candidate array is a forward value or
// decision, not a gradient.
func forwardArray(name string) bool { return !strings.HasPrefix(name, "grad.") }

// needed is the second part: whether each deviation of r is needed, some
// array of values r moves onto the candidate's (explained) being outside
// tolerance of the set without it (byKey holds those sets' results).
func needed(r DeviationResult, explained []string, byKey map[string]DeviationResult) bool {
	names := strings.Split(r.Name, "+")
	for _, d := range names {
		without, ok := byKey[withoutKey(names, d, r.Variant)]
		if !ok {
			return false
		}
		rest := passing(without)
		if !slices.ContainsFunc(explained, func(a string) bool { return valueArray(a) && !rest[a] }) {
			return false // d moves no array of values onto the candidate's
		}
	}
	return true
}

// valueArray reports whether a candidate array holds values, not a
// selection or a 0/1 mask: one that an unnamed bug is not likely to
// reproduce by chance.
func valueArray(name string) bool {
	for _, s := range []string{"selected", "targets", "routed", "expert_choice"} {
		if strings.HasSuffix(name, s) {
			return false
		}
	}
	return true
}

// passing maps each array a result judged to whether it is within
// tolerance.
func passing(r DeviationResult) map[string]bool {
	m := make(map[string]bool, len(r.arrays))
	for _, a := range r.arrays {
		m[a.Name] = a.Status == judge.StatusPass
	}
	return m
}

// withoutKey is the result key of the set names without d ("" for the
// oracle), gather_first_k's variant kept while it stays in the set.
func withoutKey(names []string, d, variant string) string {
	rest := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == d })
	if !slices.Contains(rest, "gather_first_k") {
		variant = ""
	}
	return resultKey(strings.Join(rest, "+"), variant)
}

// judgeWithout judges, and adds to byKey, every set of deviations that is
// one of sets without one deviation and that byKey lacks.
func judgeWithout(c *format.Case, cand map[string]*format.Array, w map[string]written, sets []DeviationResult, byKey map[string]DeviationResult) error {
	var missing []combination
	seen := map[string]bool{}
	for _, r := range sets {
		names := strings.Split(r.Name, "+")
		if len(names) < 3 {
			continue // the single deviations were all judged
		}
		for _, d := range names {
			key := withoutKey(names, d, r.Variant)
			if _, ok := byKey[key]; ok || seen[key] {
				continue
			}
			seen[key] = true
			rest := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == d })
			v := r.Variant
			if !slices.Contains(rest, "gather_first_k") {
				v = ""
			}
			missing = append(missing, combination{rest, v})
		}
	}
	judged, _, err := judgeCombinations(c, cand, w, missing, nil, nil, false)
	if err != nil {
		return err
	}
	for _, r := range judged {
		byKey[resultKey(r.Name, r.Variant)] = r
	}
	return nil
}

// remainder is where the candidate first departs from the truth with p's
// deviations applied.
func remainder(c *format.Case, cand map[string]*format.Array, w map[string]written, p *Partial) (*judge.Departure, error) {
	d, ok := combineVariant(p.Present, p.Variant)
	if !ok {
		return nil, nil
	}
	d.written, d.scale = w, p.Scale
	ems := []emulation{{name: d.name, variant: p.Variant}}
	if err := emulateDeviations(c, []layerDeviation{d}, ems, nil); err != nil || ems[0].reason != "" {
		return nil, err
	}
	dc, err := deviantCase(c, ems[0])
	if err != nil {
		return nil, err
	}
	res, err := judge.CompareWith(dc, cand, judge.SkipMissing)
	if err != nil {
		return nil, err
	}
	return judge.Depart(dc, cand, res), nil
}
