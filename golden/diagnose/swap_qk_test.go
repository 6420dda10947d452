package diagnose

import (
	"slices"
	"strings"
	"testing"
)

// TestQKSwapped: queries and keys swapped change a layer's output and
// exchange the roles of Wq's and Wk's gradients, and diagnose names the
// deviation on a layer case and a model case (golden/torch plants it
// independently, after RoPE, in .ci/run); grouped-query attention, whose
// key heads are fewer, is not emulated.
func TestQKSwapped(t *testing.T) {
	for _, name := range []string{"layer-paper", "model-every-other"} {
		c := loadCase(t, name)
		cand, err := DeviantCandidate(c, "qk_swapped", "")
		if err != nil {
			t.Fatal(err)
		}
		out := "out"
		if _, ok := cand[out]; !ok {
			out = "logits"
		}
		if slices.Equal(cand[out].F, c.Arrays["expected."+out].F) {
			t.Errorf("%s: swapping q and k leaves %s as it was", name, out)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		if got := matched(rs); !slices.Equal(got, []string{"qk_swapped"}) {
			t.Errorf("%s: matched %v, want qk_swapped", name, got)
		}
	}
	if em := findAny(t, emulated(t, loadCase(t, "layer-gqa")), "qk_swapped"); !strings.HasPrefix(em.reason, "grouped-query attention") {
		t.Errorf("layer-gqa: qk_swapped reason %q", em.reason)
	}
	if got := swappedQK("grad.param.L2.Bk"); got != "grad.param.L2.Bq" {
		t.Errorf("swappedQK(grad.param.L2.Bk) = %s", got)
	}
}
