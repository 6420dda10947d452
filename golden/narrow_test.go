package golden

import (
	"strings"
	"testing"
)

// TestNarrowLayerNormIsMarked checks that gen --config says in the
// description of a case with a LayerNorm narrower than MinLayerNormD that
// the bf16 and fp16 profiles' tolerances do not hold there, and says
// nothing of the kind at MinLayerNormD.
func TestNarrowLayerNormIsMarked(t *testing.T) {
	for _, tc := range []struct {
		d      string
		marked bool
	}{{"4", true}, {"8", false}} {
		raw := `{"name": "narrow", "kind": "layer", "seed": 5, "config": {"batch": 2, "seq_len": 5, "layer": {"d_model": ` + tc.d +
			`, "heads": 2, "d_ff": 5, "norm": "layernorm", "norm_eps": 1e-05, "mlp": "gelu", "positions": "rope", "rope_base": 10000, "router": "linear", "capacity": {"kind": "ratio", "ratio": 0.5}, "weighting": "sigmoid", "compute": "gather", "aux": "none", "causal": "off"}}}`
		g, err := DecodeGenConfig([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		c, err := generateCase(g)
		if err != nil {
			t.Fatal(err)
		}
		desc := c.Manifest.Description
		if got := strings.Contains(desc, "Ill conditioned by construction: LayerNorm over d = "+tc.d); got != tc.marked {
			t.Errorf("d = %s: description %q, marked %v, want %v", tc.d, desc, got, tc.marked)
		}
	}
}
