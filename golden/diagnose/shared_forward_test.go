package diagnose

import (
	"math"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestSharedForwardSameBits checks that an emulation started from ref's
// forward shared with the case's other emulations (sharedForward: the
// decision's forward, the kept forward at ref's decision, the block
// passes on gathered tokens) computes every array with the bits of one
// started on its own, for every deviation emulated on layer cases of
// several routings, each single deviation and the combinations of two
// that gather (so that the passes are shared), and that passes were
// shared at all.
func TestSharedForwardSameBits(t *testing.T) {
	shared := 0
	for _, name := range []string{"layer-paper", "layer-padding-load-balance", "layer-causal-router", "layer-window", "layer-gqa", "layer-capacity-floor"} {
		c, err := format.Load("../corpus", name)
		if err != nil {
			t.Fatal(err)
		}
		s := layerSpecOf(c)
		_, devs, err := layerEmulations(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		var all []layerDeviation
		for _, d := range devs {
			if d.skip != nil && d.skip(s.Config) != "" || d.sharedRouter {
				continue
			}
			all = append(all, d)
			for _, n := range []string{"residual_twice", "targets_first_row", "tanh_gate"} {
				if n == d.name || !d.gathered() {
					continue
				}
				if cd, ok := combineNames(inDeviationOrder(d.name, n)); ok && (cd.skip == nil || cd.skip(s.Config) == "") {
					all = append(all, cd)
				}
			}
		}
		forward := &sharedForward{sharePasses: true}
		for _, d := range all {
			if !d.hasBackward() {
				continue
			}
			own, sh := d, d
			own.forward, sh.forward = nil, forward
			want, err := layerArrays(c, s, &own)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, d.name, err)
			}
			got, err := layerArrays(c, s, &sh)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, d.name, err)
			}
			for n, w := range want {
				g := got[n]
				if g == nil || !slices.Equal(g.Shape, w.Shape) || !slices.EqualFunc(g.F, w.F, sameFloatBits) || !slices.Equal(g.I, w.I) {
					t.Errorf("%s, %s: %s differs from the shared forward's", name, d.name, n)
				}
			}
		}
		shared += len(forward.passes)
	}
	if shared == 0 {
		t.Error("no block pass was shared")
	}
}

// sameFloatBits reports whether a and b have the same bits.
func sameFloatBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// TestDiagnoseIndependentOfGOMAXPROCS diagnoses a candidate with two
// deviations planted (the search for combinations run, with shared
// passes) on one processor and on four, and finds the same results.
func TestDiagnoseIndependentOfGOMAXPROCS(t *testing.T) {
	c, err := format.Load("../corpus", "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	cand, err := DeviantCandidate(c, "residual_twice+weight_mlp_only", "")
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var rs [2][]DeviationResult
	for i, procs := range []int{1, 4} {
		runtime.GOMAXPROCS(procs)
		if rs[i], err = Diagnose(c, cand); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(rs[0], rs[1]) {
		t.Errorf("GOMAXPROCS 1 and 4 give different results:\n%+v\n%+v", rs[0], rs[1])
	}
	if last := rs[0][len(rs[0])-1]; last.Name != "residual_twice+weight_mlp_only" || !last.Match {
		t.Errorf("the last result is %s (match %t), want residual_twice+weight_mlp_only matching", last.Name, last.Match)
	}
}
