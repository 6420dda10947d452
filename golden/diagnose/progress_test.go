package diagnose

import (
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestDiagnoseProgress checks that DiagnoseProgress reports 0 and then
// counts every deviant recomputation once, in order, up to the number of
// emulated deviations less those that compute the oracle's values on this
// case (capacity_floor_zero on layer-paper: int(0.5·8) is the robust
// floor; aux_over_padding: layer-paper has no padding), which are not
// recomputed.
func TestDiagnoseProgress(t *testing.T) {
	c, err := format.Load("../corpus", "layer-paper")
	if err != nil {
		t.Fatal(err)
	}
	var calls [][2]int
	results, err := DiagnoseProgress(c, c.Candidate(), func(done, total int) {
		calls = append(calls, [2]int{done, total})
	})
	if err != nil {
		t.Fatal(err)
	}
	emulated := 0
	for _, r := range results[1:] {
		if r.Emulated && r.Name != "capacity_floor_zero" && r.Name != "aux_over_padding" {
			emulated++
		}
	}
	if emulated == 0 || len(calls) != emulated+1 {
		t.Fatalf("%d progress calls for %d emulated deviations: %v", len(calls), emulated, calls)
	}
	for i, call := range calls {
		if call != [2]int{i, emulated} {
			t.Errorf("call %d is (done %d, total %d), want (%d, %d)", i, call[0], call[1], i, emulated)
		}
	}
}
