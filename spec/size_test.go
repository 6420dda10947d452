package spec

import (
	"fmt"
	"strings"
	"testing"
)

// TestSizeBounds checks that each size bound is refused one above it,
// naming the field, the value and the bound, and accepted at it.
func TestSizeBounds(t *testing.T) {
	block := func(f func(*BlockConfig)) func() error {
		return func() error { b := DefaultBlockConfig(8, 2, 16); f(&b); return b.Validate() }
	}
	model := func(f func(*ModelConfig)) func() error {
		return func() error {
			m := ModelConfig{Vocab: 16, Layers: []ModelLayer{{Config: Config{Block: DefaultBlockConfig(8, 2, 16)}}}}
			f(&m)
			return m.Validate()
		}
	}
	routed := func(f func(*Config)) func() error {
		return func() error { c := DefaultConfig(DefaultBlockConfig(8, 2, 16), 0.5); f(&c); return c.Validate() }
	}
	mode := func(f func(*MoDEConfig)) func() error {
		return func() error {
			c := MoDEConfig{Block: DefaultBlockConfig(8, 2, 16), Form: MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.5}
			f(&c)
			return c.Validate()
		}
	}
	for _, c := range []struct {
		field string
		bound int
		set   func(v int) func() error
	}{
		{"D", MaxD, func(v int) func() error { return block(func(b *BlockConfig) { b.D, b.Heads = v, 2 }) }},
		{"DFF", MaxDFF, func(v int) func() error { return block(func(b *BlockConfig) { b.DFF = v }) }},
		{"PredictorHidden", MaxDFF, func(v int) func() error { return routed(func(c *Config) { c.PredictorHidden = v }) }},
		{"Vocab", MaxVocab, func(v int) func() error { return model(func(m *ModelConfig) { m.Vocab = v }) }},
		{"MaxLen", MaxPositions, func(v int) func() error { return model(func(m *ModelConfig) { m.MaxLen = v }) }},
		{"layers", MaxLayers, func(v int) func() error {
			return model(func(m *ModelConfig) {
				for len(m.Layers) < v {
					m.Layers = append(m.Layers, m.Layers[0])
				}
			})
		}},
		{"Experts", MaxExperts, func(v int) func() error { return mode(func(c *MoDEConfig) { c.Experts = v }) }},
		{"NoOpExperts", MaxExperts, func(v int) func() error { return mode(func(c *MoDEConfig) { c.NoOpExperts = v }) }},
	} {
		if err := c.set(c.bound)(); err != nil {
			t.Errorf("%s = %d (the bound): %v", c.field, c.bound, err)
		}
		err := c.set(c.bound + 1)()
		want := fmt.Sprintf("%s = %d exceeds the bound %d", c.field, c.bound+1, c.bound)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s = %d: error %v, want one saying %q", c.field, c.bound+1, err, want)
		}
	}
	// A pattern over a billion layers is refused before its list is made.
	if _, err := (Pattern{Kind: PatternAll}).Routed(1e9); err == nil || !strings.Contains(err.Error(), "layers = 1000000000 exceeds the bound 1024") {
		t.Errorf("Routed(1e9): %v, want the bound named", err)
	}
}
