package fuzz

import (
	"sync/atomic"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

var layerCount struct{ skipped, changed, mlpOnly, dense, padded atomic.Int64 }

// skipProp is docs/spec.md §6 and §7 (Eq. 1): a token that skips the
// layer (or is padding) comes out bit-identical to its input, and with f
// forced to zero (Wo = 0 and W2 = 0, so Attn and MLP both return 0) every
// token does, selected ones included. That second half catches the residual
// counted twice, out = x + g(x + f), and the residual scaled, out = g(x + f)
// (docs/spec.md §11). Under MLP-only routing a skipped token still gets
// the dense attention's update, so there only padding passes unchanged.
func skipProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{float32: impl.Float32})
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s: %v\n%s", impl.Name, err, c)
		}
		if c.cfg.MLPOnly {
			layerCount.mlpOnly.Add(1)
		}
		if c.cfg.Compute == spec.ComputeDense {
			layerCount.dense.Add(1)
		}
		for b := 0; b < c.rows; b++ {
			v := validLen(c.in.Valid, b, c.s)
			for i := 0; i < c.s; i++ {
				sel := i < v && isSelected(res.Selection, b, i)
				if i >= v {
					layerCount.padded.Add(1)
				}
				if sel || (c.cfg.MLPOnly && i < v) {
					if rowDiff(res.Out[b], c.in.X[b], i) >= 0 {
						layerCount.changed.Add(1)
					}
					continue
				}
				layerCount.skipped.Add(1)
				if j := rowDiff(res.Out[b], c.in.X[b], i); j >= 0 {
					t.Fatalf("%s: row %d position %d (skipped; V_b = %d) column %d: out = %v, want the input %v bit for bit\n%s",
						impl.Name, b, i, v, j, res.Out[b].At(i, j), c.in.X[b].At(i, j), c)
				}
			}
		}
		// f = 0: every output equals its input.
		c.p.Block.Wo.Zero()
		c.p.Block.W2.Zero()
		res, err = impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s with Wo = W2 = 0: %v\n%s", impl.Name, err, c)
		}
		for b := 0; b < c.rows; b++ {
			for i := 0; i < c.s; i++ {
				if j := rowDiff(res.Out[b], c.in.X[b], i); j >= 0 {
					t.Fatalf("%s with f = 0 (Wo = W2 = 0): row %d position %d (selected %v) column %d: out = %v, want the input %v; the residual is counted twice or scaled\n%s",
						impl.Name, b, i, isSelected(res.Selection, b, i), j, res.Out[b].At(i, j), c.in.X[b].At(i, j), c)
				}
			}
		}
	}
}

var causalCount struct{ compared, routedBefore atomic.Int64 }

// causalRoutingProp is docs/spec.md §9: with causal routing (r > 0 or
// q > 0, raw/sigmoid/none weighting) a token's routing and output depend on
// the tokens at or before it only, so changing every token after t leaves
// the outputs and the routing at positions <= t bit-identical.
func causalRoutingProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{causal: true, float32: impl.Float32})
		cut := src.Int(0, c.s-1, "t")
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s: %v\n%s", impl.Name, err, c)
		}
		in2 := copyInputs(c.in)
		changeFuture(src, c, in2, cut)
		res2, err := impl.Layer(c.cfg, c.p, in2)
		if err != nil {
			t.Fatalf("%s after changing tokens > %d: %v\n%s", impl.Name, cut, err, c)
		}
		for b := 0; b < c.rows; b++ {
			for i := 0; i <= cut; i++ {
				causalCount.compared.Add(1)
				if isSelected(res.Selection, b, i) != isSelected(res2.Selection, b, i) {
					t.Fatalf("%s: causal routing (%s): changing the tokens after %d flipped the routing of row %d position %d\n%s", impl.Name, c.cfg.Causal, cut, b, i, c)
				}
				if isSelected(res.Selection, b, i) {
					causalCount.routedBefore.Add(1)
				}
				if j := rowDiff(res.Out[b], res2.Out[b], i); j >= 0 {
					t.Fatalf("%s: causal routing (%s): changing the tokens after %d changed row %d position %d column %d from %v to %v\n%s",
						impl.Name, c.cfg.Causal, cut, b, i, j, res.Out[b].At(i, j), res2.Out[b].At(i, j), c)
				}
			}
		}
	}
}

// changeFuture redraws every row of in after position cut: X (scaled
// differently), noise and jitter.
func changeFuture(src Source, c *layerCase, in ref.LayerInputs, cut int) {
	for b := range in.X {
		fresh := genMatrix(src, c.rng, c.s, c.cfg.Block.D, false, c.f32)
		for i := cut + 1; i < c.s; i++ {
			in.X[b].SetRow(i, fresh.RawRowView(i))
			if in.Noise != nil {
				in.Noise[b][i] = c.rng.NormFloat64() * 3
			}
			if in.Jitter != nil {
				in.Jitter[b][i] = c.rng.NormFloat64()
			}
		}
	}
	if c.f32 {
		roundInputs(in)
	}
}

func TestSkippedTokensUnchanged(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			for _, n := range []*atomic.Int64{&layerCount.skipped, &layerCount.changed, &layerCount.mlpOnly, &layerCount.dense, &layerCount.padded} {
				n.Store(0)
			}
			check(t, skipProp(impl))
			for name, n := range map[string]int64{
				"skipped tokens":           layerCount.skipped.Load(),
				"changed selected tokens":  layerCount.changed.Load(),
				"MLP-only layers":          layerCount.mlpOnly.Load(),
				"dense (straight-through)": layerCount.dense.Load(),
				"padded positions":         layerCount.padded.Load(),
			} {
				if n == 0 {
					t.Errorf("%s: no %s in 100 draws: the property was not exercised", impl.Name, name)
				}
				t.Logf("%s: %s: %d", impl.Name, name, n)
			}
		})
	}
}

func TestCausalRoutingIsCausal(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			causalCount.compared.Store(0)
			causalCount.routedBefore.Store(0)
			check(t, causalRoutingProp(impl))
			if causalCount.routedBefore.Load() == 0 {
				t.Fatalf("%s: no routed token at or before the cut in %d comparisons", impl.Name, causalCount.compared.Load())
			}
			t.Logf("%s: positions compared: %d, routed among them: %d", impl.Name, causalCount.compared.Load(), causalCount.routedBefore.Load())
		})
	}
}

// TestTopKIsNotCausal measures the non-causality of top-k training routing
// (docs/spec.md §9): how often changing the tokens after t flips the
// selection of a token at or before t. The rate must be above zero, or the
// causal-routing test above would not be telling anything apart.
func TestTopKIsNotCausal(t *testing.T) {
	const draws = 2000
	src := &byteSource{}
	flips, outChanged, eligible := 0, 0, 0
	for n := range draws {
		src.data, src.pos = seedBytes(uint64(n), 256), 0
		c := genLayer(src, layerOpts{topK: true, noPadding: true})
		if c.s < 2 {
			continue
		}
		cut := src.Int(0, c.s-2, "t")
		eligible++
		res, err := Ref.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatal(err)
		}
		in2 := copyInputs(c.in)
		changeFuture(src, c, in2, cut)
		res2, err := Ref.Layer(c.cfg, c.p, in2)
		if err != nil {
			t.Fatal(err)
		}
		flipped, changed := false, false
		for b := 0; b < c.rows; b++ {
			for i := 0; i <= cut; i++ {
				if isSelected(res.Selection, b, i) != isSelected(res2.Selection, b, i) {
					flipped = true
				}
				if rowDiff(res.Out[b], res2.Out[b], i) >= 0 {
					changed = true
				}
			}
		}
		if flipped {
			flips++
		}
		if changed {
			outChanged++
		}
	}
	t.Logf("top-k routing: a change after t flipped a selection at or before t in %d of %d draws (%.1f%%); it changed an output at or before t in %d (%.1f%%)",
		flips, eligible, 100*float64(flips)/float64(eligible), outChanged, 100*float64(outChanged)/float64(eligible))
	if flips == 0 {
		t.Fatalf("no selection flip in %d draws: top-k routing looks causal, which docs/spec.md §9 says it is not", eligible)
	}
}

// seedBytes returns n deterministic pseudo-random bytes.
func seedBytes(seed uint64, n int) []byte {
	rng := ref.NewRand(seed)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

var leakCount struct{ softmax, softmaxLeaks atomic.Int64 }

// frozenCausalityProp is docs/spec.md §6 with the selection held fixed:
// under raw, sigmoid and none weighting a token's output depends on tokens
// after it only through the selection, so with the selection frozen a change
// of the future leaves the past bit-identical. Softmax normalises over the
// whole row's selected tokens and leaks; that is counted, and shown in
// TestSoftmaxLeaks.
func frozenCausalityProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{topK: true, float32: impl.Float32})
		cut := src.Int(0, c.s-1, "t")
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s: %v\n%s", impl.Name, err, c)
		}
		in2 := copyInputs(c.in)
		changeFuture(src, c, in2, cut)
		res2, err := impl.LayerFrozen(c.cfg, c.p, in2, res.Frozen)
		if err != nil {
			t.Fatalf("%s frozen: %v\n%s", impl.Name, err, c)
		}
		leak := false
		for b := 0; b < c.rows; b++ {
			for i := 0; i <= cut; i++ {
				j := rowDiff(res.Out[b], res2.Out[b], i)
				if j < 0 {
					continue
				}
				if c.cfg.Weighting != spec.WeightSoftmax {
					t.Fatalf("%s: %s weighting, selection frozen: changing the tokens after %d changed row %d position %d column %d from %v to %v\n%s",
						impl.Name, c.cfg.Weighting, cut, b, i, j, res.Out[b].At(i, j), res2.Out[b].At(i, j), c)
				}
				leak = true
			}
		}
		if c.cfg.Weighting == spec.WeightSoftmax {
			leakCount.softmax.Add(1)
			if leak {
				leakCount.softmaxLeaks.Add(1)
			}
		}
	}
}

// TestFrozenWeightingCausality runs on every implementation: ref's
// LayerForwardFrozen and mod's Layer.ForwardFrozen replay a decision.
func TestFrozenWeightingCausality(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			leakCount.softmax.Store(0)
			leakCount.softmaxLeaks.Store(0)
			for range 5 {
				check(t, frozenCausalityProp(impl))
			}
			n, leaks := leakCount.softmax.Load(), leakCount.softmaxLeaks.Load()
			t.Logf("%s: softmax draws: %d, past output changed by the future in %d", impl.Name, n, leaks)
			if leaks == 0 {
				t.Fatalf("%s: softmax weighting never leaked in %d draws; docs/spec.md §6 says it does", impl.Name, n)
			}
		})
	}
}

// TestSoftmaxLeaks shows the leak on one case: the selection is frozen, only
// the router weight of the last token changes (the random router's noise),
// and a past token's output moves under softmax and never under raw,
// sigmoid or none.
func TestSoftmaxLeaks(t *testing.T) {
	for _, w := range []spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightNone, spec.WeightSoftmax} {
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 2, 8), 0.5)
		cfg.Router, cfg.Weighting = spec.RouterRandom, w
		rng := ref.NewRand(7)
		p := ref.NewLayerParams(cfg, rng)
		in := ref.LayerInputs{X: []*mat.Dense{ref.RandomMatrix(rng, 4, 4, 1)}, Noise: [][]float64{{1, -1, 0.5, 2}}}
		res, err := ref.LayerForward(cfg, p, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Selection.Rows[0]; len(got) != 2 || got[0] != 0 || got[1] != 3 {
			t.Fatalf("selection %v, want [0 3]", got)
		}
		in.Noise = [][]float64{{1, -1, 0.5, 3}} // only token 3's router weight changes
		res2, err := ref.LayerForwardFrozen(cfg, p, in, res.Frozen)
		if err != nil {
			t.Fatal(err)
		}
		d := res2.Out[0].At(0, 0) - res.Out[0].At(0, 0)
		moved := rowDiff(res.Out[0], res2.Out[0], 0) >= 0
		t.Logf("%-8s: token 0's output moved by %.3g (column 0) when token 3's router weight went from 2 to 3", w, d)
		if moved != (w == spec.WeightSoftmax) {
			t.Errorf("%s weighting: token 0's output moved = %v, want %v", w, moved, w == spec.WeightSoftmax)
		}
	}
}

func FuzzSkippedTokens(f *testing.F)   { f.Fuzz(fuzzImpls(skipProp, Impls)) }
func FuzzCausalRouting(f *testing.F)   { f.Fuzz(fuzzImpls(causalRoutingProp, Impls)) }
func FuzzFrozenCausality(f *testing.F) { f.Fuzz(fuzzImpls(frozenCausalityProp, Impls)) }
