package diagnose

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modref/modref/golden/format"
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

// TestDecodeRouterNormed plants router_normed_input in decode-router,
// whose routed layers have linear routers: the deviant decoder, its router
// reading N1(x) token by token, must agree with the deviant full forward
// (each routed layer's decoded routing flags are its selection, and the
// decoded logits are within the logits' tolerance of the forward's),
// depart from the case's own decoding, and be named by Diagnose.
func TestDecodeRouterNormed(t *testing.T) {
	c := loadCase(t, "decode-router")
	cand, err := DeviantCandidate(c, "router_normed_input", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"L0", "L2"} {
		sel, routed := cand[l+".selected"], cand[l+".routed"]
		s := routed.Shape[1]
		for b := range routed.Shape[0] {
			want := make([]int64, s)
			for _, p := range sel.I[b*sel.Shape[1] : (b+1)*sel.Shape[1]] {
				if p >= 0 {
					want[p] = 1
				}
			}
			if got := routed.I[b*s : (b+1)*s]; !slices.Equal(got, want) {
				t.Errorf("%s row %d: decoded routing %v, the forward selects %v", l, b, got, want)
			}
		}
	}
	tol := *c.Manifest.Arrays[slices.IndexFunc(c.Manifest.Arrays, func(a format.ArrayInfo) bool { return a.Name == "expected.logits" })].Tolerance
	own := c.Arrays["expected.decode_logits"].F
	departs := false
	for k, v := range cand["decode_logits"].F {
		if f := cand["logits"].F[k]; math.Abs(v-f) > tol.ATol+tol.RTol*math.Abs(f) {
			t.Fatalf("decode_logits[%d] = %g, the deviant forward's logits %g", k, v, f)
		}
		departs = departs || math.Abs(v-own[k]) > tol.ATol+tol.RTol*math.Abs(own[k])
	}
	if !departs {
		t.Error("the deviant decoding is within tolerance of the case's own")
	}
	rs, err := Diagnose(c, cand)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rs, func(r DeviationResult) bool { return r.Name == "router_normed_input" })
	if i < 0 || !rs[i].Match || !rs[i].Distinct {
		t.Errorf("router_normed_input planted, its result %+v", rs[max(i, 0)])
	}
}
