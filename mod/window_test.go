package mod

import (
	"testing"

	"github.com/modref/modref/spec"
)

// TestDecoderKeepsOnlyTheWindow checks that with a window w every layer's
// cache holds at most w tokens, within w positions of its last one
// (docs/spec.md §13), the dense layers exactly the last w positions,
// however long the sequence: the memory of decoding stays bounded. (That decoding with a window equals
// the full forward is TestDecodeEqualsFullForward, which draws windows.)
func TestDecoderKeepsOnlyTheWindow(t *testing.T) {
	const w = 3
	routing := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	routing.Block.Window = w
	routing.Causal = spec.CausalRouter
	cfg, err := spec.NewModelConfig(11, 0, 3, routing, spec.Pattern{Kind: spec.PatternEveryOther}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := NewDecoder(m)
	if err != nil {
		t.Fatal(err)
	}
	routed, nRouted := 0, 0
	for _, rl := range m.Layers {
		if rl != nil {
			nRouted++
		}
	}
	for pos := range 40 {
		st, err := dec.Step(pos % 11)
		if err != nil {
			t.Fatal(err)
		}
		for l, c := range dec.caches {
			d := cfg.Block().D
			if len(c.keys) != len(c.pos)*d || len(c.values) != len(c.pos)*d {
				t.Fatalf("position %d layer %d: %d positions with %d keys and %d values of width %d", pos, l, len(c.pos), len(c.keys), len(c.values), d)
			}
			// A routed layer evicts when a token joins it, so its cache
			// holds the window of its last routed token.
			if n := len(c.pos); n > w || (n > 0 && c.pos[0] <= c.pos[n-1]-w) {
				t.Fatalf("position %d layer %d: cache holds positions %v, more than the window of %d behind the last", pos, l, c.pos, w)
			}
			if m.Layers[l] == nil && len(c.pos) != min(pos+1, w) {
				t.Fatalf("position %d dense layer %d: cache holds %v, want the last %d positions", pos, l, c.pos, w)
			}
		}
		for l, rl := range m.Layers {
			if rl != nil && st.Routed[l] {
				routed++
			}
		}
	}
	if routed == 0 || routed == 40*nRouted {
		t.Fatalf("the routed layers routed %d of %d tokens; the test needs both routed and skipped ones", routed, 40*nRouted)
	}
}
