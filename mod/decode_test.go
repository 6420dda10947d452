package mod_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
	"pgregory.net/rapid"
)

// decodeTol bounds the difference between token-by-token decoding and the
// full causal forward, both float32 in mod. They run the same operations on
// matrices of different shapes; over 1000 drawn models on amd64 with AVX2
// the logits came out bit for bit equal (measured difference 0), but a
// matrix kernel is free to sum in a shape-dependent order, so the bound
// allows float32 round-off of a few layers (about 30 units in the last
// place of the scale).
var decodeTol = tol{scale: 2e-6}

// checkDecode decodes every sequence of a causal-routing model token by
// token and compares logits and routing decisions with one full forward.
func checkDecode(t *rapid.T, c modelCase) {
	decisiveRefForward(t, c)
	m := modelFromRef(t, c.cfg, c.p)
	var tp autograd.Tape
	full, err := m.Forward(&tp, modcase.ModelInputsFromRef(c.in))
	if err != nil {
		t.Fatal(err)
	}
	s, vocab := len(c.in.Tokens[0]), c.cfg.Vocab
	for b, tokens := range c.in.Tokens {
		v := s
		if c.in.Valid != nil {
			v = c.in.Valid[b]
		}
		dec, err := mod.NewDecoder(m)
		if err != nil {
			t.Fatal(err)
		}
		var got []float32
		for i := range v {
			st, err := dec.Step(tokens[i])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, st.Logits...)
			for l, lr := range full.Layers {
				if lr != nil && st.Routed[l] != slices.Contains(lr.Selected[b], i) {
					t.Fatalf("row %d position %d layer %d: decoding routed %v, the full forward selected %v", b, i, l, st.Routed[l], lr.Selected[b])
				}
			}
		}
		wantRow := make([]float64, 0, v*vocab)
		for _, x := range full.Logits.Data[b*s*vocab : (b*s+v)*vocab] {
			wantRow = append(wantRow, float64(x))
		}
		compare(t, "decode", fmt.Sprintf("row %d logits", b), got, wantRow, nil, decodeTol)
	}
}

// TestDecodeEqualsFullForward decodes causal-routing models of every layer
// pattern, router, weighting, predictor and position encoding.
func TestDecodeEqualsFullForward(t *testing.T) {
	rapidChecks(60)
	rapid.Check(t, func(t *rapid.T) { checkDecode(t, drawModelCase(t, true)) })
}

// TestDecodePatterns pins decoding to named layer patterns with a linear
// router and router_bce, so that each pattern is covered on every run.
func TestDecodePatterns(t *testing.T) {
	rapidChecks(20)
	for _, pat := range []spec.Pattern{
		{Kind: spec.PatternAll},
		{Kind: spec.PatternEveryOther},
		{Kind: spec.PatternEveryNth, Every: 3, Offset: 1},
		{Kind: spec.PatternDenseEnds, DenseStart: 1, DenseEnd: 1},
		{Kind: spec.PatternList, Layers: []int{1, 2}},
	} {
		t.Run(string(pat.Kind), func(t *testing.T) {
			routing := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
			routing.Causal, routing.Aux, routing.AuxWeight, routing.Weighting = spec.CausalRouter, spec.AuxRouterBCE, 0.1, spec.WeightSigmoid
			cfg, err := spec.NewModelConfig(11, 0, 4, routing, pat, nil)
			if err != nil {
				t.Fatal(err)
			}
			rapid.Check(t, func(rt *rapid.T) {
				seed := rapid.Uint64().Draw(rt, "seed")
				c := modelCase{cfg: cfg, p: ref.NewModelParams(cfg, seed)}
				roundParams(c.p.Tensors())
				c.in.Tokens, c.in.Targets = ref.RandomTokens(ref.NewRand(seed), 2, 9, cfg.Vocab)
				checkDecode(rt, c)
			})
		})
	}
}

// TestDecoderRejects checks that NewDecoder names the layer and field that
// make causal decoding impossible.
func TestDecoderRejects(t *testing.T) {
	base := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	base.Causal = spec.CausalRouter
	for _, tc := range []struct {
		change func(*spec.Config)
		want   string
	}{
		{func(c *spec.Config) { c.Causal = spec.CausalOff }, "layer 0 has Causal = off"},
		{func(c *spec.Config) { c.Router = spec.RouterRandom }, "layer 0 has Router = random"},
		{func(c *spec.Config) { c.Jitter = 0.1 }, "layer 0 has Jitter = 0.1"},
	} {
		cfg := base
		tc.change(&cfg)
		mc, err := spec.NewModelConfig(8, 0, 2, cfg, spec.Pattern{Kind: spec.PatternEveryOther}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mod.NewModel(mc, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mod.NewDecoder(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDecoder: error %v, want one containing %q", err, tc.want)
		}
	}
}

// TestDecoderMemoryIsBounded checks that, with an attention window that
// bounds every cache, a decoding step of a model whose routed layers route
// some tokens and skip others allocates only its StepResult (the result,
// its three per-layer slices and the logits) once the caches are full,
// though consecutive steps record different operations on the tape.
func TestDecoderMemoryIsBounded(t *testing.T) {
	routing := spec.DefaultConfig(spec.DefaultBlockConfig(16, 2, 32), 0.5)
	routing.Causal, routing.Block.Window = spec.CausalRouter, 4
	cfg, err := spec.NewModelConfig(32, 0, 4, routing, spec.Pattern{Kind: spec.PatternAll}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mod.NewModel(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := mod.NewDecoder(m)
	if err != nil {
		t.Fatal(err)
	}
	pos, routed, skipped := 0, 0, 0
	step := func() {
		st, err := dec.Step((pos * 7) % cfg.Vocab)
		if err != nil {
			t.Fatal(err)
		}
		pos++
		for _, r := range st.Routed {
			if r {
				routed++
			} else {
				skipped++
			}
		}
	}
	for range 64 {
		step()
	}
	if n := testing.AllocsPerRun(64, step); n != 5 {
		t.Errorf("a decoding step with full caches allocates %v times, want 5 (its StepResult)", n)
	}
	if routed == 0 || skipped == 0 {
		t.Errorf("the layers routed %d and skipped %d tokens; the test needs both", routed, skipped)
	}
}
