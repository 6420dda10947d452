package format

import (
	"os"
	"strings"
	"testing"
)

// TestManifestRejectsBadConfig feeds the manifest reader edited copies of a
// real manifest; each must be one error naming what is wrong.
func TestManifestRejectsBadConfig(t *testing.T) {
	raw, err := os.ReadFile("../corpus/layer-padding.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeManifest(raw); err != nil {
		t.Fatalf("the committed manifest: %v", err)
	}
	src := string(raw)
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"version", `"version": 1`, `"version": 7`, "format version 7 is not supported"},
		{"format", `"modref-golden"`, `"other"`, `format is "other"`},
		{"short valid_lengths", "\"valid_lengths\": [\n      10,\n      6\n    ]", "\"valid_lengths\": [\n      10\n    ]", "valid_lengths has 1 entries"},
		{"long valid length", "\"valid_lengths\": [\n      10,", "\"valid_lengths\": [\n      11,", "valid_lengths[0] = 11"},
		{"unknown field", `"layer": {`, `"layer": null, "x": {`, `unknown field "x"`},
		{"kind", `"kind": "layer"`, `"kind": "block"`, `kind "block"`},
		{"unknown catch", `"catches": [`, `"catches": ["off_by_two", `, `"off_by_two" is not a deviation`},
		{"truncated", `"arrays"`, `"arr`, "not a valid manifest"},
	} {
		edited := strings.Replace(src, c.old, c.new, 1)
		if edited == src {
			t.Fatalf("%s: %q not found in the manifest", c.name, c.old)
		}
		_, err := decodeManifest([]byte(edited))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// A layer case whose layer is null (its configuration moved to a
	// model's "layers") must be refused before anything dereferences it.
	edited := strings.Replace(src, `"layer": {`, `"layer": null, "layers": [{"routed": true, "layer": {`, 1)
	edited = strings.Replace(edited, `"causal": "off"
    }`, `"causal": "off"
    }}]`, 1)
	if _, err := decodeManifest([]byte(edited)); err == nil || !strings.Contains(err.Error(), "a layer case needs config.layer") {
		t.Errorf("layer case with a null layer: error %v", err)
	}
}
