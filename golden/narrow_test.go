package golden

import (
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/format"
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

// TestNarrowNotJudgedInCoarseFormats: the bf16 and fp16 profiles refuse
// a case with a LayerNorm narrower than MinLayerNormD or any block
// narrower than format.MinCoarseD, float32 and tf32 judge it, and every
// profile judges one at d = 8; gen --config refuses such a case naming
// bf16 or fp16 as its precision.
func TestNarrowNotJudgedInCoarseFormats(t *testing.T) {
	config := func(d, norm, precision string) string {
		return `{"name": "narrow", "kind": "layer", "seed": 5, "precision": "` + precision + `", "config": {"batch": 2, "seq_len": 5, "layer": {"d_model": ` + d +
			`, "heads": 2, "d_ff": 5, "norm": "` + norm + `", "norm_eps": 1e-05, "mlp": "gelu", "positions": "rope", "rope_base": 10000, "router": "linear", "capacity": {"kind": "ratio", "ratio": 0.5}, "weighting": "sigmoid", "compute": "gather", "aux": "none", "causal": "off"}}}`
	}
	for _, tc := range []struct {
		d, norm string
		refused []string
	}{
		{"4", "layernorm", []string{"bf16", "fp16"}},
		{"4", "rmsnorm", []string{"bf16", "fp16"}},
		{"8", "layernorm", nil},
		{"8", "rmsnorm", nil},
	} {
		for _, p := range format.Profiles {
			g, err := DecodeGenConfig([]byte(config(tc.d, tc.norm, p.Name)))
			want := slices.Contains(tc.refused, p.Name)
			if got := err != nil; got != want {
				t.Errorf("%s at d = %s, precision %s: gen --config error %v, want refused %v", tc.norm, tc.d, p.Name, err, want)
				continue
			}
			if want {
				if !strings.Contains(err.Error(), "d = "+tc.d+" features") {
					t.Errorf("%s at d = %s, precision %s: error %q does not name the LayerNorm's width", tc.norm, tc.d, p.Name, err)
				}
				continue
			}
			if err := p.Judges(g.Config); err != nil {
				t.Errorf("%s at d = %s: %s does not judge it: %v", tc.norm, tc.d, p.Name, err)
			}
		}
		g, err := DecodeGenConfig([]byte(config(tc.d, tc.norm, "")))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range format.Profiles {
			if err := p.Judges(g.Config); (err != nil) != slices.Contains(tc.refused, p.Name) {
				t.Errorf("%s at d = %s: %s judges it: %v", tc.norm, tc.d, p.Name, err)
			}
		}
	}
}
