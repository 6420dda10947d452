package fuzzcase

import (
	"math"
	"math/rand/v2"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/internal/elem"
)

// kinds are the case kinds Draw draws when the base pins none, with their
// weights: a layer case is the cheapest and has the most choices.
var kinds = []weighted[string]{
	{format.KindLayer, 5}, {format.KindModel, 2}, {format.KindDecode, 2}, {format.KindMoDE, 1},
}

// weighted is a choice and its weight.
type weighted[T any] struct {
	v T
	w int
}

// pick draws one of the choices in proportion to its weight.
func pick[T any](rng *rand.Rand, cs []weighted[T]) T {
	total := 0
	for _, c := range cs {
		total += c.w
	}
	n := rng.IntN(total)
	for _, c := range cs {
		if n -= c.w; n < 0 {
			return c.v
		}
	}
	return cs[len(cs)-1].v
}

// one draws one of vs, each as likely.
func one[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

// drawSeq draws a sequence length in [lo, maxSeq]: tiny (up to 8) half the
// time, small (up to 32) a quarter, and otherwise log-uniform up to maxSeq,
// odd lengths as likely as even ones.
func drawSeq(rng *rand.Rand, lo, maxSeq int) int {
	hi := maxSeq
	switch u := rng.Float64(); {
	case u < 0.5:
		hi = min(hi, 8)
	case u < 0.75:
		hi = min(hi, 32)
	default:
		if hi > 33 {
			s := int(elem.Exp(elem.Log(33) + float64(rng.Float64()*(elem.Log(float64(hi))-elem.Log(33)))))
			return max(lo, min(hi, s))
		}
	}
	if hi <= lo {
		return max(1, min(lo, maxSeq))
	}
	return lo + rng.IntN(hi-lo+1)
}

// drawBlock draws a block's fields: heads 1-4 of a head width from 2 to
// 128 (small ones more often: the bound on recomputation keeps wide
// heads to short sequences, Fit), d_ff from 1 to 4·d, either norm and
// MLP (LayerNorm from d = MinLayerNormD), RoPE or learned positions, and a
// sliding window in a third of the draws.
func drawBlock(rng *rand.Rand, seq int) map[string]any {
	heads := one(rng, 1, 2, 3, 4)
	dh := pick(rng, []weighted[int]{{2, 3}, {4, 4}, {8, 3}, {16, 2}, {32, 1}, {64, 1}, {128, 1}})
	d := heads * dh
	dff := one(rng, d, 2*d, 4*d, 1+rng.IntN(2*d))
	b := map[string]any{
		"d_model": d, "heads": heads, "d_ff": dff,
		"norm": one(rng, "rmsnorm", "layernorm"), "norm_eps": one(rng, 1e-6, 1e-5),
		"mlp": one(rng, "gelu", "swiglu"), "positions": pick(rng, []weighted[string]{{"rope", 3}, {"learned", 1}}),
		"rope_base": pick(rng, []weighted[float64]{{10000, 3}, {500000, 1}}),
	}
	if d < MinLayerNormD {
		// Drawn as before, so that a seed draws the same cases otherwise.
		b["norm"] = "rmsnorm"
	}
	if rng.IntN(3) == 0 {
		b["window"] = 1 + rng.IntN(seq)
	}
	return b
}

// MinLayerNormD is the narrowest width at which a draw normalises by
// LayerNorm (RMSNorm below it). LayerNorm over d features maps onto a
// (d−2)-sphere: at d = 2 its output is ±1 whatever the input, so every
// gradient through it cancels exactly but for eps (truth 1e-7 where a
// correct pure-bf16 implementation computes 1e-3, 7200 times its
// tolerance), and at d = 4 a correct pure-bf16 implementation still missed
// its tolerance by 1.4 times; such a case is ill conditioned by
// construction, not hard (docs/fuzzing.md, docs/tolerances.md).
const MinLayerNormD = golden.MinLayerNormD

// drawRouting adds a routed layer's choices to block b: every router,
// with or without jitter; every capacity rule; every weighting; gather or
// dense compute; MLP-only routing; every auxiliary objective, with a
// load-balancing loss; causal routing (always, for a decode case).
func drawRouting(rng *rand.Rand, b map[string]any, seq int, decode bool) map[string]any {
	l := make(map[string]any, len(b)+11)
	for k, v := range b {
		l[k] = v
	}
	l["router"] = one(rng, "linear", "linear_bias", "l2norm", "random")
	l["jitter"] = pick(rng, []weighted[float64]{{0, 4}, {0.1, 1}})
	switch one(rng, "ratio", "ratio", "integer", "log") {
	case "ratio":
		l["capacity"] = map[string]any{"kind": "ratio", "ratio": one(rng, 0.125, 0.25, 0.5, 0.75, 1, math.Round(float64(rng.Float64()*1000)+1)/1001)}
	case "integer":
		l["capacity"] = map[string]any{"kind": "integer", "tokens": 1 + rng.IntN(seq)}
	default:
		l["capacity"] = map[string]any{"kind": "log", "ratio": one(rng, 0.125, 0.25, 0.5), "max_len": max(2, seq+rng.IntN(4*seq+1))}
	}
	l["weighting"] = one(rng, "raw", "sigmoid", "softmax", "none")
	l["compute"] = pick(rng, []weighted[string]{{"gather", 3}, {"dense", 1}})
	l["mlp_only"] = rng.IntN(5) == 0
	l["aux"] = one(rng, "none", "router_bce", "predictor")
	l["aux_weight"] = 0.0
	if l["aux"] != "none" {
		l["aux_weight"] = one(rng, 0.0, 0.01, 0.1, 1)
	}
	l["load_balance_weight"] = pick(rng, []weighted[float64]{{0, 4}, {0.01, 1}})
	l["predictor_hidden"] = 0
	if rng.IntN(2) == 0 {
		l["predictor_hidden"] = 1 + rng.IntN(8)
	}
	l["causal"] = pick(rng, []weighted[string]{{"off", 4}, {"router", 1}, {"predictor", 1}})
	if decode {
		// Decoding routes causally and deterministically (no random
		// router), and jitter is training-only.
		if l["router"] == "random" {
			l["router"] = "linear"
		}
		if l["causal"] == "off" {
			l["causal"] = one(rng, "router", "predictor")
		}
		l["jitter"] = 0.0
	}
	return l
}

// drawKind draws a configuration of the given kind, in GenConfig's JSON
// form (without its name).
func drawKind(rng *rand.Rand, maxSeq int, kind string) map[string]any {
	lo, hi := 1, maxSeq
	if kind == format.KindMoDE {
		// A MoDE case needs tokens no expert chose and tokens several
		// chose, every gate gap clear of a tie: a few tokens to a few
		// dozen.
		lo, hi = min(8, maxSeq), min(maxSeq, 32)
	}
	seq := drawSeq(rng, lo, hi)
	batch := pick(rng, []weighted[int]{{1, 2}, {2, 3}, {3, 2}, {4, 1}})
	cfg := map[string]any{"batch": batch, "seq_len": seq}
	if kind != format.KindMoDE && rng.IntN(3) == 0 {
		valid := make([]any, batch)
		for b := range valid {
			valid[b] = one(rng, seq, seq, rng.IntN(seq+1))
		}
		cfg["valid_lengths"] = valid
	}
	block := drawBlock(rng, seq)
	switch kind {
	case format.KindLayer:
		cfg["layer"] = drawRouting(rng, block, seq, false)
	case format.KindMoDE:
		block["positions"] = "rope"
		m := block
		m["form"] = one(rng, "staged", "integrated")
		m["experts"] = 2 + rng.IntN(3)
		m["expert_capacity"] = one(rng, 0.25, 0.5)
		if m["form"] == "staged" {
			m["noop_experts"], m["capacity"] = 0, one(rng, 0.25, 0.5, 0.75, 1)
		} else {
			m["noop_experts"], m["capacity"] = 1+rng.IntN(2), 0
		}
		cfg["mode"] = m
	default:
		decode := kind == format.KindDecode
		n := one(rng, 1, 2, 2, 3, 4)
		routed := drawPattern(rng, n)
		shared := drawRouting(rng, block, seq, decode)
		layers := make([]any, n)
		for l := range layers {
			c := shared
			if rng.IntN(3) == 0 {
				c = drawRouting(rng, block, seq, decode) // a layer of its own
			}
			layers[l] = map[string]any{"routed": routed[l], "layer": c}
		}
		cfg["layers"] = layers
		cfg["vocab"] = one(rng, 2, 5, 16, 64)
		if block["positions"] == "learned" {
			cfg["max_len"] = seq + rng.IntN(seq+1)
		}
	}
	return map[string]any{"kind": kind, "seed": rng.IntN(1 << 31), "config": cfg}
}

// drawAttention draws the attention of every block of raw, a drawKind
// configuration, alike: grouped-query attention (kv_heads, a divisor of
// heads below it) in a third of the draws with several heads, and biases
// on q, k and v (qkv_bias) in a quarter (docs/spec.md §5). It draws after
// drawKind, so that the rest of a case's draw is what it was before these
// fields were drawn.
func drawAttention(rng *rand.Rand, raw map[string]any) {
	cfg := raw["config"].(map[string]any)
	var blocks []map[string]any
	for _, k := range []string{"layer", "mode"} {
		if b, ok := cfg[k].(map[string]any); ok {
			blocks = append(blocks, b)
		}
	}
	if layers, ok := cfg["layers"].([]any); ok {
		for _, l := range layers {
			blocks = append(blocks, l.(map[string]any)["layer"].(map[string]any))
		}
	}
	heads := blocks[0]["heads"].(int)
	var fewer []int // the divisors of heads below it
	for kv := 1; kv < heads; kv++ {
		if heads%kv == 0 {
			fewer = append(fewer, kv)
		}
	}
	kv := 0
	if len(fewer) > 0 && rng.IntN(3) == 0 {
		kv = one(rng, fewer...)
	}
	bias := rng.IntN(4) == 0
	for _, b := range blocks {
		if kv > 0 {
			b["kv_heads"] = kv
		}
		if bias {
			b["qkv_bias"] = true
		}
	}
}

// drawPattern draws which of n layers are routed, by one of docs/spec.md
// §10's patterns: all, every other, every n-th from an offset, dense ends,
// or a list; at least one layer is routed.
func drawPattern(rng *rand.Rand, n int) []bool {
	routed := make([]bool, n)
	switch one(rng, "all", "every_other", "every_nth", "dense_ends", "list") {
	case "all":
		for l := range routed {
			routed[l] = true
		}
	case "every_other":
		for l := 0; l < n; l += 2 {
			routed[l] = true
		}
	case "every_nth":
		every, off := 1+rng.IntN(3), rng.IntN(n)
		for l := off; l < n; l += every {
			routed[l] = true
		}
	case "dense_ends":
		start := rng.IntN(n)
		end := rng.IntN(n - start)
		for l := start; l < n-end; l++ {
			routed[l] = true
		}
	default:
		for l := range routed {
			routed[l] = rng.IntN(2) == 0
		}
		routed[rng.IntN(n)] = true
	}
	return routed
}

// drawEdges makes some draws one of the edges the corpus holds, which a
// draw seldom reaches by chance (docs/fuzzing.md, "What is drawn"): of
// every 32 draws of a layer case, 2 are about exact top-k ties ("ties":
// "exact", a linear router, as layer-ties) and 2 routed causally, by a
// linear router or the predictor, with a score exactly 0 in every row
// ("threshold", as layer-causal-threshold); of every 32 of a layer, model
// or decode case, 1 has every routed layer at full capacity (ratio 1:
// every valid token selected) and 1 a row fully padded (valid length 0:
// no token, k = 0, an empty selection). It draws after
// drawKind and drawAttention, so that the rest of a case's draw is what it
// was before edges were drawn; a MoDE case has none of them.
func drawEdges(rng *rand.Rand, raw map[string]any) {
	cfg := raw["config"].(map[string]any)
	kind := raw["kind"].(string)
	if kind == format.KindMoDE {
		return
	}
	var routed []map[string]any
	if l, ok := cfg["layer"].(map[string]any); ok {
		routed = append(routed, l)
	}
	if layers, ok := cfg["layers"].([]any); ok {
		for _, l := range layers {
			if ml := l.(map[string]any); ml["routed"] == true {
				routed = append(routed, ml["layer"].(map[string]any))
			}
		}
	}
	switch rng.IntN(32) {
	case 0, 1:
		if kind != format.KindLayer {
			return
		}
		// Ties need a boundary in every row, a token selected and one
		// left out, and the router reading the layer's input x (not
		// x + a, as under MLP-only routing), which the tie copies. A
		// float32 implementation may compute the two copies of a tied
		// token's router weight with different bits (a matrix kernel
		// treats a block's last rows otherwise) and so route the other:
		// the judge accepts that where its own router weights order the
		// two its way (judge.JudgeFlips).
		l := routed[0]
		l["router"], l["jitter"], l["causal"], l["mlp_only"] = "linear", 0.0, "off", false
		l["capacity"] = map[string]any{"kind": "ratio", "ratio": 0.5}
		delete(cfg, "valid_lengths")
		cfg["seq_len"] = max(cfg["seq_len"].(int), 2)
		raw["ties"] = "exact"
	case 2, 3:
		if kind != format.KindLayer {
			return
		}
		l := routed[0]
		l["router"], l["jitter"], l["mlp_only"] = "linear", 0.0, false
		if l["causal"] == "off" {
			l["causal"] = one(rng, "router", "predictor")
		}
		raw["threshold"] = true
	case 4:
		for _, l := range routed {
			l["capacity"] = map[string]any{"kind": "ratio", "ratio": 1.0}
		}
	case 5:
		batch := cfg["batch"].(int)
		if batch < 2 {
			cfg["batch"] = 2
			batch = 2
		}
		seq := cfg["seq_len"].(int)
		valid := make([]any, batch)
		old, _ := cfg["valid_lengths"].([]any)
		for b := range valid {
			valid[b] = seq
			if b < len(old) {
				valid[b] = old[b]
			}
		}
		valid[rng.IntN(batch)] = 0
		cfg["valid_lengths"] = valid
	}
}
