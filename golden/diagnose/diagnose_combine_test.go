package diagnose

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestCombineNamesRules: deviations that say the same thing differently
// are not combined; sramshetty/mixture-of-depths' block is.
func TestCombineNamesRules(t *testing.T) {
	for combo, want := range map[string]bool{
		"residual_twice+rope_gathered_indices+weight_mlp_only": true,
		"residual_twice+gather_first_k":                        true,
		"residual_scaled+weight_mlp_only":                      false,
		"no_weighting+weight_mlp_only":                         false,
		"unsorted_indices+gather_first_k":                      false,
		"gather_first_k+no_causal_mask":                        false,
	} {
		if _, ok := combineNames(strings.Split(combo, "+")); ok != want {
			t.Errorf("%s: combined = %v, want %v", combo, ok, want)
		}
	}
}

// TestDiagnoseNamesCombinations plants several deviations at once through
// the Go emulations and requires Diagnose to name exactly that
// combination, and no single deviation: the seed blog's RoPE at gathered
// indices with its first-row targets, a returned residual with unsorted
// indices, a triple whose predictor deviation alone brings the candidate
// no closer, a triple with a selection change, and four at once.
func TestDiagnoseNamesCombinations(t *testing.T) {
	for _, tc := range []struct{ name, combo string }{
		{"layer-router-bce", "rope_gathered_indices+targets_first_row"},
		{"layer-paper", "residual_twice+unsorted_indices"},
		{"layer-predictor", "residual_twice+predictor_no_stopgrad+targets_first_row"},
		{"layer-paper", "residual_twice+rope_gathered_indices+weight_mlp_only"},
		// astramind-ai/Mixture-of-depths without an attention mask: the
		// selection changes, and every other deviation alone looks as
		// far as the oracle.
		{"layer-paper", "residual_scaled+capacity_off_by_one+no_causal_mask"},
		// sramshetty/mixture-of-depths' routed block before its fix of
		// 2024-06-06.
		{"layer-integer-capacity", "residual_twice+rope_gathered_indices+weight_mlp_only+gather_first_k"},
	} {
		c := loadCase(t, tc.name)
		cand, err := DeviantCandidate(c, tc.combo, "")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		var matched []string
		for _, r := range rs {
			if r.Match {
				matched = append(matched, r.Name)
			}
		}
		if !slices.Equal(matched, []string{tc.combo}) {
			t.Errorf("%s, candidate with %s: matched %v, want only the combination", tc.name, tc.combo, matched)
		}
	}
}

// TestDiagnoseNoCombination: a candidate that no deviation or combination
// explains gets no match, and the combinations reported grow from a
// deviation that brings it closer alone (no_weighting, and by a little
// weight_mlp_only and tanh_gate, whose combination is closer still).
func TestDiagnoseNoCombination(t *testing.T) {
	c := loadCase(t, "layer-paper")
	cand, err := DeviantCandidate(c, "no_weighting", "")
	if err != nil {
		t.Fatal(err)
	}
	out := *cand["out"]
	out.F = slices.Clone(out.F)
	out.F[5] += 1
	cand["out"] = &out
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	closer := map[string]bool{}
	for _, r := range rs[1:] {
		if !strings.Contains(r.Name, "+") && r.Distinct && r.distance < rs[0].distance {
			closer[r.Name] = true
		}
	}
	if !closer["no_weighting"] {
		t.Errorf("no_weighting does not bring the candidate closer")
	}
	for _, r := range rs {
		if r.Match {
			t.Errorf("%s matches a candidate with a corrupted out", r.Name)
		}
		if names := strings.Split(r.Name, "+"); len(names) > 1 && !slices.ContainsFunc(names, func(n string) bool { return closer[n] }) {
			t.Errorf("combination %s reported, though none of its deviations brings the candidate closer (those that do: %v)", r.Name, closer)
		}
	}
}

// TestRefusedCombinationsCannotMatch judges sets of deviations on a
// candidate with a pair planted, once refusing those whose forward arrays
// (or, where the decision changes, selection) the candidate departs from
// and once computing every one whole: the refused sets are exactly some
// that do not match (at least one refused at its selection, before the
// layer runs: capacity_off_by_one's), and every set not refused has the
// same result both ways, the planted pair among them, matching.
func TestRefusedCombinationsCannotMatch(t *testing.T) {
	c := loadCase(t, "layer-paper")
	const planted = "residual_twice+rope_gathered_indices"
	cand, err := DeviantCandidate(c, planted, "")
	if err != nil {
		t.Fatal(err)
	}
	w := writtenByLayer(c, cand)
	var sets []combination
	for _, other := range []string{"rope_gathered_indices", "capacity_off_by_one", "weight_mlp_only", "tanh_gate", "targets_first_row", "skipped_scaled"} {
		sets = append(sets, combination{names: inDeviationOrder("residual_twice", other)})
	}
	whole, refused, err := judgeCombinations(c, cand, w, sets, nil, new(sharedForward), false)
	if err != nil || len(refused) > 0 {
		t.Fatalf("without refusal: %d refused, %v", len(refused), err)
	}
	forward := new(sharedForward)
	forward.sharePasses = true
	some, refused, err := judgeCombinations(c, cand, w, sets, nil, forward, true)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]DeviationResult{}
	for _, r := range whole {
		byName[r.Name] = r
	}
	if len(some)+len(refused) != len(whole) {
		t.Fatalf("%d results and %d refused, want %d in all", len(some), len(refused), len(whole))
	}
	for _, set := range refused {
		if r := byName[strings.Join(set.names, "+")]; r.Match {
			t.Errorf("%s refused, but it matches", r.Name)
		}
	}
	if !slices.ContainsFunc(refused, func(s combination) bool { return slices.Contains(s.names, "capacity_off_by_one") }) {
		t.Errorf("residual_twice+capacity_off_by_one not refused (refused %v)", refused)
	}
	matched := false
	for _, r := range some {
		want := byName[r.Name]
		if r.Match != want.Match || r.Matching != want.Matching || r.Distinct != want.Distinct || !reflect.DeepEqual(r.Worst, want.Worst) || r.distance != want.distance {
			t.Errorf("%s: %+v with refusal, %+v without", r.Name, r, want)
		}
		matched = matched || r.Name == planted && r.Match
	}
	if !matched {
		t.Errorf("%s not judged a match with refusal: %+v", planted, some)
	}
}

// TestRefusalChangesNoResult runs Diagnose on candidates with named
// deviations planted, found at two, three and four deviations, and on one
// with an unnamed bug besides (no set matches, so that every size ranks
// refused sets), with the combination search's refusal and without it:
// the results must be the same, distances included.
func TestRefusalChangesNoResult(t *testing.T) {
	for _, tc := range []struct{ name, combo, unnamed string }{
		{"layer-paper", "residual_twice+unsorted_indices", ""},
		{"layer-paper", "residual_twice+rope_gathered_indices+weight_mlp_only", ""},
		{"layer-integer-capacity", "residual_twice+rope_gathered_indices+weight_mlp_only+gather_first_k", ""},
		{"layer-capacity-floor", "residual_twice+weight_mlp_only", "router_detached"},
	} {
		c := loadCase(t, tc.name)
		cand, err := DeviantCandidate(c, tc.combo, "")
		if err != nil {
			t.Fatal(err)
		}
		if tc.unnamed != "" {
			unnamedBugs[tc.unnamed](c, cand)
		}
		refused, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		refuseSets = false
		whole, err := Diagnose(c, cand)
		refuseSets = true
		if err != nil {
			t.Fatal(err)
		}
		if len(refused) != len(whole) {
			t.Fatalf("%s, %s: %d results with refusal, %d without", tc.name, tc.combo, len(refused), len(whole))
		}
		for i, r := range refused {
			w := whole[i]
			if !reflect.DeepEqual(r, w) {
				t.Errorf("%s, %s: result %d is %s (distance %g) with refusal, %s (distance %g) without", tc.name, tc.combo, i, r.Name, r.distance, w.Name, w.distance)
			}
		}
	}
}
