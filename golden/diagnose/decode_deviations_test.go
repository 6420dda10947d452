package diagnose

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDecodeCombinations plants deviations in a decode case's forward and
// decoding at once, up to five with a decode_mismatch variant, and
// requires Diagnose to name the planted set by the combination search
// (where found is set), and every set it names to hold only planted
// deviations (no claim of one that is absent). On decode-router,
// sramshetty/mixture-of-depths' model
// (residual_twice+rope_gathered_indices+weight_mlp_only+shared_router) is
// found by the second search, ranked by the first departure: by the
// distance, no pair of its deviations brings the candidate closer than
// shared_router alone (the selection of the layer after the first
// changes), though residual_twice brings that layer's router weights
// nearer.
func TestDecodeCombinations(t *testing.T) {
	for _, tc := range []struct {
		name, devs, variant string
		found               bool
	}{
		{"decode-router", "residual_twice+shared_router", "", true},
		{"decode-router", "weight_mlp_only+qk_swapped", "", true},
		{"decode-router", "residual_twice+decode_mismatch", "skipped tokens cached", true},
		{"decode-router", "residual_twice+rope_gathered_indices+weight_mlp_only+shared_router", "", true},
		{"decode-router", "residual_twice+weight_mlp_only+decode_mismatch+shared_router+qk_swapped", "skipped tokens cached", true},
		{"decode-window", "window_gathered_indices+shared_router+tanh_gate", "", true},
		{"decode-mlp-only", "residual_scaled+skipped_scaled+decode_mismatch", "routing off at inference", true},
	} {
		c := loadCase(t, tc.name)
		cand, err := DeviantCandidate(c, tc.devs, tc.variant)
		if err != nil {
			t.Fatalf("%s: %s: %v", tc.name, tc.devs, err)
		}
		start := time.Now()
		res, err := Diagnose(c, cand)
		if err != nil {
			t.Fatalf("%s: %s: %v", tc.name, tc.devs, err)
		}
		planted := strings.Split(tc.devs, "+")
		slices.Sort(planted)
		var named []string
		found := false
		for _, r := range res[1:] {
			if !r.Match || !r.Distinct {
				continue
			}
			named = append(named, label(r))
			got := strings.Split(r.Name, "+")
			slices.Sort(got)
			if slices.Equal(got, planted) && r.Variant == tc.variant {
				found = true
			}
			for _, n := range got {
				if !slices.Contains(planted, n) {
					t.Errorf("%s: planted %s, names %s, which holds %s", tc.name, tc.devs, label(r), n)
				}
			}
		}
		if found != tc.found {
			t.Errorf("%s: planted %s (%s), named %v; want it named %t", tc.name, tc.devs, tc.variant, named, tc.found)
		}
		t.Logf("%s: %s: named %v in %v", tc.name, tc.devs, named, time.Since(start).Round(time.Millisecond))
	}
}
