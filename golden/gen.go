package golden

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/spec"
)

// DefaultDir is the corpus directory, relative to the repository root.
const DefaultDir = "golden/corpus"

// The size of the small blocks the cases use.
const (
	caseD     = 8
	caseHeads = 2
	caseDFF   = 16
)

// All deviations a gather-compute layer case with raw weights exposes.
var gatherCatches = []string{"residual_twice", "residual_scaled", "unsorted_indices", "no_weighting", "capacity_off_by_one", "rope_gathered_indices"}

func block() spec.BlockConfig { return spec.DefaultBlockConfig(caseD, caseHeads, caseDFF) }

// llamaBlock is the block of the grouped-query cases, Llama-3's shape at
// a small size: d = 16, 4 query heads of d_h = 4 sharing kv key and value
// heads (docs/spec.md §5), RMSNorm, SwiGLU of width 16, RoPE base 500000.
// With 2 key and value heads, query heads 0, 1 read key head 0 and 2, 3
// key head 1, so a port that pairs them the other way round (0, 2 and 1,
// 3) changes the case.
func llamaBlock(kv int) spec.BlockConfig {
	b := spec.DefaultBlockConfig(16, 4, 16)
	b.KVHeads, b.MLP, b.RoPEBase = kv, spec.ActSwiGLU, 500000
	return b
}

// qwenBlock is llamaBlock(2) with Qwen's biases on q, k and v and its RoPE
// base 1000000.
func qwenBlock() spec.BlockConfig {
	b := llamaBlock(2)
	b.QKVBias, b.RoPEBase = true, 1000000
	return b
}

// paper is the paper's routed layer with capacity ratio c.
func paper(c float64) spec.Config { return spec.DefaultConfig(block(), c) }

// with returns cfg changed by f.
func with(cfg spec.Config, f func(*spec.Config)) spec.Config {
	f(&cfg)
	return cfg
}

// layerSpecs is the catalogue of layer cases.
func layerSpecs() []oracle.LayerSpec {
	ls := func(name, desc string, catches []string, cfg spec.Config) oracle.LayerSpec {
		return oracle.LayerSpec{Name: name, Description: desc, Catches: catches, Seed: 1, Batch: 2, SeqLen: 8, Config: cfg}
	}
	specs := []oracle.LayerSpec{
		ls("layer-paper", "The paper's routed layer (Eq. 1): linear router without bias on the raw residual stream, "+
			"capacity ratio 0.5, top-k per row, gather, pre-norm block with RoPE at original positions, out = x + r·f.",
			append([]string{"targets_first_row", "no_causal_mask"}, gatherCatches...), paper(0.5)),
		ls("layer-linear-bias-sigmoid", "Linear router with bias; sigmoid output weight g = σ(r).",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Router, c.Weighting = spec.RouterLinearBias, spec.WeightSigmoid })),
		ls("layer-l2norm", "Parameter-free router r = ‖x‖₂; raw weighting.",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Router = spec.RouterL2Norm })),
		ls("layer-random", "The paper's stochastic-routing baseline: r drawn from N(0,1), given as input.noise.",
			[]string{"residual_twice", "residual_scaled", "unsorted_indices", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.Router = spec.RouterRandom })),
		ls("layer-jitter", "Training-time jitter r + 0.1·ε with ε given as input.jitter; sigmoid weighting.",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Jitter, c.Weighting = 0.1, spec.WeightSigmoid })),
		ls("layer-softmax", "Softmax of r over each row's selected tokens as the weight (the blog seed's choice).",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Weighting = spec.WeightSoftmax })),
		// With g = 1, g·(x + f) = x + g·f: residual_scaled changes nothing here.
		ls("layer-none", "No weighting, g = 1: the router receives no gradient from the output.",
			[]string{"residual_twice", "unsorted_indices", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.Weighting = spec.WeightNone })),
		ls("layer-dense-ste", "Dense compute with the straight-through weight w = g + sg(m·g − g) (docs/spec.md §7), sigmoid g.",
			[]string{"ste_m_plus_1", "residual_twice", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.Compute, c.Weighting = spec.ComputeDense, spec.WeightSigmoid })),
		ls("layer-dense-ste-raw", "Dense compute with the straight-through weight and raw g = r.",
			[]string{"ste_m_plus_1", "residual_twice", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.Compute = spec.ComputeDense })),
		ls("layer-mlp-only", "MLP-only routing: attention runs densely over all tokens, only the MLP is routed.",
			[]string{"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.MLPOnly = true })),
		ls("layer-router-bce", "Auxiliary router_bce loss (weight 0.1): BCE-with-logits of r against the top-k targets.",
			append([]string{"targets_first_row"}, gatherCatches...),
			with(paper(0.5), func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxRouterBCE, 0.1 })),
		ls("layer-predictor", "Auxiliary predictor (Linear d→d/2, SiLU, Linear d/2→1) on sg(x), BCE against the targets, weight 0.1.",
			append([]string{"predictor_no_stopgrad", "predictor_block_output", "targets_first_row"}, gatherCatches...),
			with(paper(0.5), func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxPredictor, 0.1 })),
		ls("layer-softmax-losses", "Both auxiliary losses under softmax weighting: router_bce (weight 0.1) and load balancing (weight 0.01), g the softmax of r over each row's selected tokens.",
			append([]string{"targets_first_row"}, gatherCatches...), with(paper(0.5), func(c *spec.Config) {
				c.Weighting, c.Aux, c.AuxWeight, c.LoadBalanceWeight = spec.WeightSoftmax, spec.AuxRouterBCE, 0.1, 0.01
			})),
		// With g = 1, g·(x + f) = x + g·f: residual_scaled changes nothing here.
		ls("layer-none-predictor", "The auxiliary predictor (weight 0.1) under no weighting, g = 1: only the predictor's loss trains anything routing-related.",
			[]string{"residual_twice", "unsorted_indices", "capacity_off_by_one", "predictor_no_stopgrad", "predictor_block_output", "targets_first_row", "rope_gathered_indices"},
			with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight = spec.WeightNone, spec.AuxPredictor, 0.1 })),
		ls("layer-load-balance", "Load-balancing loss S·Σ_s F_s P_s with weight 0.01, sigmoid weighting.",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.LoadBalanceWeight, c.Weighting = 0.01, spec.WeightSigmoid })),
		ls("layer-layernorm-swiglu", "LayerNorm instead of RMSNorm and a SwiGLU MLP.",
			gatherCatches, with(paper(0.5), func(c *spec.Config) {
				c.Block.Norm, c.Block.NormEps, c.Block.MLP = spec.NormLayer, 1e-5, spec.ActSwiGLU
			})),
		ls("layer-integer-capacity", "Integer capacity C = 3 tokens per row (the paper's capacity per batch element).",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Capacity = spec.Capacity{Kind: spec.CapacityInteger, Tokens: 3} })),
		ls("layer-log-capacity", "Logarithmic capacity scaling with length: ratio(S) = 1 − (ln S/ln S_max)(1 − c), c = 0.25, S_max = 64.",
			gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Capacity = spec.Capacity{Kind: spec.CapacityLog, Ratio: 0.25, MaxLen: 64} })),
		// 0.35·8 = 2.8 is far from a whole number: floor gives k = 2, rounding
		// to nearest or up gives 3 (layer-capacity-floor is the float trap).
		ls("layer-fractional-capacity", "Capacity ratio 0.35 of S = 8: c·S = 2.8 is not a whole number, k = ⌊2.8⌋ = 2; a capacity rounded to nearest or up would be 3.",
			gatherCatches, paper(0.35)),
		ls("layer-causal-router", "Causal routing (docs/spec.md §9): a token is routed iff r > 0, no capacity; router_bce trains it.",
			[]string{"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) { c.Causal, c.Aux, c.AuxWeight = spec.CausalRouter, spec.AuxRouterBCE, 0.1 })),
		ls("layer-causal-predictor", "Causal routing by the predictor: a token is routed iff q > 0; the predictor trains on sg(x).",
			[]string{"residual_twice", "residual_scaled", "predictor_no_stopgrad", "capacity_off_by_one"},
			with(paper(0.5), func(c *spec.Config) {
				c.Causal, c.Aux, c.AuxWeight, c.Weighting = spec.CausalPredictor, spec.AuxPredictor, 0.1, spec.WeightSigmoid
			})),
		ls("layer-gqa", "Grouped-query attention (docs/spec.md §5) in a Llama-3-style block: 4 query heads of d_h = 4 share 2 key and value heads (heads 0 and 1 read key and value head 0, heads 2 and 3 head 1; Wk and Wv are 16×8), RMSNorm, SwiGLU, RoPE base 500000; the paper's routing at capacity 0.5.",
			gatherCatches, spec.DefaultConfig(llamaBlock(2), 0.5)),
		ls("layer-qkv-bias", "A Qwen-style block (docs/spec.md §5): biases on the query, key and value projections (b_q of 16, b_k and b_v of 8; Wo and the MLP have none), 4 query heads sharing 2 key and value heads, RMSNorm, SwiGLU, RoPE base 1000000; the paper's routing at capacity 0.5.",
			gatherCatches, spec.DefaultConfig(qwenBlock(), 0.5)),
		ls("layer-window", "Sliding-window attention, w = 3, in the routed block (docs/spec.md §13): a selected token at position p attends to the selected tokens at original positions in (p − 3, p], not to the last 3 of the gathered subset.",
			append([]string{"window_gathered_indices"}, gatherCatches...),
			with(paper(0.5), func(c *spec.Config) { c.Block.Window = 3 })),
	}
	padding := ls("layer-padding", "Right padding: rows of 10 and 6 valid tokens, ratio 0.5 gives k = 5 and 3; padded positions are never selected and count in no loss.",
		gatherCatches, with(paper(0.5), func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxRouterBCE, 0.1 }))
	padding.SeqLen, padding.Valid = 10, []int{10, 6}
	paddedLB := ls("layer-padding-load-balance", "Right padding under every loss: rows of 10 and 6 valid tokens, sigmoid weighting, router_bce (weight 0.1) and load balancing (weight 0.01); padded positions count in neither loss (F_s and P_s are 0 there, means over all B rows).",
		append([]string{"targets_first_row"}, gatherCatches...), with(paper(0.5), func(c *spec.Config) {
			c.Weighting, c.Aux, c.AuxWeight, c.LoadBalanceWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1, 0.01
		}))
	paddedLB.SeqLen, paddedLB.Valid = 10, []int{10, 6}
	// The auxiliary losses under every weighting (docs/spec.md §6, §8), each
	// with right padding, which no loss may count: with the cases above,
	// router_bce, the predictor and load balancing each appear under raw,
	// sigmoid, softmax and no weighting, and under padding.
	var losses []oracle.LayerSpec
	for _, x := range []struct {
		name, what string
		w          spec.Weighting
		aux        spec.AuxObjective
		catches    []string
	}{
		{"layer-losses-raw", "raw weighting, g = r", spec.WeightRaw, spec.AuxPredictor,
			append([]string{"predictor_no_stopgrad", "predictor_block_output", "targets_first_row"}, gatherCatches...)},
		{"layer-losses-sigmoid", "sigmoid weighting", spec.WeightSigmoid, spec.AuxPredictor,
			append([]string{"predictor_no_stopgrad", "predictor_block_output", "targets_first_row"}, gatherCatches...)},
		{"layer-losses-softmax", "softmax weighting", spec.WeightSoftmax, spec.AuxPredictor,
			append([]string{"predictor_no_stopgrad", "predictor_block_output", "targets_first_row"}, gatherCatches...)},
		// With g = 1, g·(x + f) = x + g·f: residual_scaled and no_weighting change nothing here.
		{"layer-losses-none", "no weighting, g = 1", spec.WeightNone, spec.AuxRouterBCE,
			[]string{"residual_twice", "unsorted_indices", "capacity_off_by_one", "rope_gathered_indices", "targets_first_row"}},
	} {
		what := "the auxiliary predictor (weight 0.1)"
		if x.aux == spec.AuxRouterBCE {
			what = "router_bce (weight 0.1)"
		}
		l := ls(x.name, fmt.Sprintf("The auxiliary losses under %s: %s and load balancing (weight 0.01), with right padding, rows of 10 and 6 valid tokens; padded positions count in neither loss.", x.what, what),
			x.catches, with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight, c.LoadBalanceWeight = x.w, x.aux, 0.1, 0.01 }))
		l.SeqLen, l.Valid = 10, []int{10, 6}
		losses = append(losses, l)
	}
	floor := ls("layer-capacity-floor", "The float-robust capacity floor: c = 0.29 of S = 100 must give k = 29, though 0.29·100 = 28.999999999999996 in float64.",
		[]string{"capacity_off_by_one", "capacity_floor_zero", "residual_twice"}, paper(0.29))
	floor.SeqLen = 100
	short := ls("layer-short-row", "A short row: ratio 0.25 of rows of 8 and 3 valid tokens gives k = 2 and 1, since k is clamped to at least 1 (docs/spec.md §3); a plain int(c·V) gives 0 for the short row.",
		[]string{"capacity_floor_zero", "capacity_off_by_one"}, paper(0.25))
	short.Valid = []int{8, 3}
	ties := ls("layer-ties", "The tie rule: in each row the first token left out has exactly the router weight of the last token selected; the lower position wins.",
		[]string{"capacity_off_by_one"}, paper(0.5))
	ties.Ties = true
	bf16Ties := ls("layer-ties-bf16", "Ties that only bf16 sees: in each row two tokens have router weights 1e-4 apart whose inputs round to the same bf16 values. "+
		"The float64 truth selects the higher one; a bf16 implementation computes equal weights and, breaking the tie by the lower position, selects the other: "+
		"a flip within the bf16 near-tie margin, judged at its own decisions (check --precision bf16). A strict '>' against the k-th weight drops both.",
		[]string{"capacity_off_by_one"}, paper(0.5))
	bf16Ties.Seed, bf16Ties.Ties, bf16Ties.RoundingTies = 2, true, true
	threshold := ls("layer-causal-threshold", "Causal routing at its threshold: in each row one token's input is 0, so its router weight is exactly 0, and it is not routed (routed iff r > 0, docs/spec.md §9); router_bce trains the router.",
		[]string{"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"},
		with(paper(0.5), func(c *spec.Config) { c.Causal, c.Aux, c.AuxWeight = spec.CausalRouter, spec.AuxRouterBCE, 0.1 }))
	threshold.Threshold = true
	specs = append(specs, padding, paddedLB)
	specs = append(specs, losses...)
	return append(specs, floor, short, ties, bf16Ties, threshold)
}

// modelSpecs is the catalogue of model and decode cases.
func modelSpecs() ([]oracle.ModelSpec, error) {
	type m struct {
		name, desc string
		catches    []string
		layers     int
		routing    spec.Config
		pattern    spec.Pattern
		capacities []spec.Capacity
		maxLen     int
		valid      []int
		decode     bool
		// batch is the number of rows, 2 when 0; distinct makes the
		// generator keep only draws in which every routed layer routes
		// each row through a different set of positions.
		batch    int
		distinct bool
		// ties makes the first layer, routed, tie in every row at the
		// k-th router weight (genModel).
		ties bool
	}
	every := spec.Pattern{Kind: spec.PatternEveryOther}
	third := spec.Pattern{Kind: spec.PatternEveryNth, Every: 3, Offset: 1}
	causal := func(c *spec.Config) {
		c.Causal, c.Aux, c.AuxWeight, c.Weighting = spec.CausalRouter, spec.AuxRouterBCE, 0.1, spec.WeightSigmoid
	}
	list := []m{
		{name: "model-every-other", desc: "A 4-layer MoD language model routing every other layer (the paper's best setting) at capacity 0.25, with padding; loss = CE.",
			catches: gatherCatches, layers: 4, routing: paper(0.25), pattern: every, valid: []int{8, 5}},
		{name: "model-all-layers", desc: "Every layer routed at capacity 0.5, sigmoid weighting, router_bce auxiliary loss.",
			catches: gatherCatches, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1 }),
			pattern: spec.Pattern{Kind: spec.PatternAll}},
		{name: "model-dense-ends", desc: "Dense first and last layers, the middle ones routed (the GPT codebase's pattern), per-layer capacities 0.5 and 0.25.",
			catches: gatherCatches, layers: 4, routing: paper(0.5),
			pattern:    spec.Pattern{Kind: spec.PatternDenseEnds, DenseStart: 1, DenseEnd: 1},
			capacities: []spec.Capacity{{Kind: spec.CapacityRatio, Ratio: 0.5}, {Kind: spec.CapacityRatio, Ratio: 0.25}}},
		{name: "model-learned-positions", desc: "Learned absolute position embeddings at the input instead of RoPE; every other layer routed, dense straight-through compute.",
			catches: []string{"ste_m_plus_1"}, layers: 2, maxLen: 8,
			routing: with(paper(0.5), func(c *spec.Config) {
				c.Block.Positions, c.Compute, c.Weighting = spec.PositionLearned, spec.ComputeDense, spec.WeightSigmoid
			}),
			pattern: every},
		{name: "model-predictor", desc: "Every other layer routed with the auxiliary predictor; its loss must not reach the trunk.",
			catches: []string{"predictor_no_stopgrad", "predictor_block_output"}, layers: 2,
			routing: with(paper(0.5), func(c *spec.Config) { c.Aux, c.AuxWeight = spec.AuxPredictor, 0.1 }), pattern: every},
		{name: "decode-router", desc: "Causal routing by r > 0 (router_bce-trained router): token-by-token decoding with per-layer caches of routed tokens equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 4,
			routing: with(paper(0.5), func(c *spec.Config) {
				c.Causal, c.Aux, c.AuxWeight, c.Weighting = spec.CausalRouter, spec.AuxRouterBCE, 0.1, spec.WeightSigmoid
			}),
			pattern: every, decode: true},
		{name: "decode-predictor", desc: "Causal routing by the predictor (q > 0) on every layer: decoding equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) {
				c.Causal, c.Aux, c.AuxWeight = spec.CausalPredictor, spec.AuxPredictor, 0.1
			}),
			pattern: spec.Pattern{Kind: spec.PatternAll}, decode: true},
		{name: "decode-window", desc: "Sliding-window attention, w = 3, in every block (docs/spec.md §13), causal routing by r > 0 every other layer: the full forward counts the window in original positions, and decoding, whose caches keep only the last 3 positions, equals it.",
			catches: []string{"decode_mismatch", "window_gathered_indices"}, layers: 4,
			routing: with(paper(0.5), func(c *spec.Config) {
				c.Block.Window = 3
				c.Causal, c.Aux, c.AuxWeight, c.Weighting = spec.CausalRouter, spec.AuxRouterBCE, 0.1, spec.WeightSigmoid
			}),
			pattern: every, decode: true},
		{name: "model-mlp-only", desc: "MLP-only routing in every other layer of 3: attention runs densely over every valid token, only the MLP is routed (capacity 0.5), with padding.",
			catches: []string{"residual_twice", "residual_scaled", "no_weighting", "capacity_off_by_one"}, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.MLPOnly = true }), pattern: every, valid: []int{8, 6}},
		{name: "decode-mlp-only", desc: "MLP-only routing by r > 0 in every other layer of 3: decoding caches every token's keys and values in each layer and routes only the MLP, and equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { causal(c); c.MLPOnly = true }), pattern: every, decode: true},
		{name: "model-every-third", desc: "The every-n-th pattern with n = 3 from layer 1: of 5 layers, layers 1 and 4 are routed at capacity 0.5.",
			catches: gatherCatches, layers: 5, routing: paper(0.5), pattern: third},
		{name: "decode-every-third", desc: "The every-n-th pattern (n = 3 from layer 1, layers 1 and 4 of 5 routed) with causal routing by r > 0: decoding equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 5, routing: with(paper(0.5), causal), pattern: third, decode: true},
		{name: "model-layer-list", desc: "An explicit list of routed layers, 0, 1 and 3 of 4 (two routed layers in a row, a dense one, a routed last layer), capacity 0.5, sigmoid weighting.",
			catches: gatherCatches, layers: 4,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting = spec.WeightSigmoid }),
			pattern: spec.Pattern{Kind: spec.PatternList, Layers: []int{0, 1, 3}}},
		{name: "decode-layer-list", desc: "An explicit list of routed layers, 1 and 2 of 4, with causal routing by r > 0: decoding, whose dense first and last layers cache every token, equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 4, routing: with(paper(0.5), causal),
			pattern: spec.Pattern{Kind: spec.PatternList, Layers: []int{1, 2}}, decode: true},
		{name: "decode-padding", desc: "Right padding during decoding: rows of 8 and 5 valid tokens, causal routing by r > 0 in every other layer of 4; each row is decoded for its valid tokens only and equals the full causal forward there (decode_logits and routed are 0 at padded positions).",
			catches: []string{"decode_mismatch"}, layers: 4, routing: with(paper(0.5), causal), pattern: every,
			valid: []int{8, 5}, decode: true},
		{name: "model-batch-rows", desc: "Three rows of 8, 7 and 5 valid tokens, every layer of 2 routed at capacity 0.5 with router_bce: each row routes a different set of positions in every layer (the generator keeps only such draws), so per-row top-k, per-row targets and per-row capacity are all exercised.",
			catches: gatherCatches, layers: 2,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1 }),
			pattern: spec.Pattern{Kind: spec.PatternAll}, valid: []int{8, 7, 5}, batch: 3, distinct: true},
		{name: "model-ties", desc: "The tie rule in a model: in each row the first layer's first token left out is the same token as its last token selected, so their router weights are exactly equal there (the layer's input is the token's embedding) and the lower position wins; every layer of 2 routed at capacity 0.5, sigmoid weighting, router_bce.",
			catches: gatherCatches, layers: 2,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1 }),
			pattern: spec.Pattern{Kind: spec.PatternAll}, ties: true},
		{name: "decode-batch-rows", desc: "Three rows decoded independently with causal routing by r > 0 on every layer of 2: each row routes a different set of positions in every layer (the generator keeps only such draws), and decoding equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 2, routing: with(paper(0.5), causal),
			pattern: spec.Pattern{Kind: spec.PatternAll}, batch: 3, distinct: true, decode: true},
		{name: "model-linear-bias", desc: "The linear router with bias and sigmoid weighting in every other layer of 3.",
			catches: gatherCatches, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Router, c.Weighting = spec.RouterLinearBias, spec.WeightSigmoid }), pattern: every},
		{name: "model-l2norm", desc: "The parameter-free router r = ‖x‖₂ with raw weighting in every other layer of 3, with padding.",
			catches: gatherCatches, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Router = spec.RouterL2Norm }), pattern: every, valid: []int{8, 6}},
		{name: "model-random", desc: "The stochastic-routing baseline in every other layer of 3: each routed layer's r is drawn from N(0,1), given as input.noise.L<l>.",
			catches: []string{"residual_twice", "residual_scaled", "unsorted_indices", "capacity_off_by_one"}, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Router = spec.RouterRandom }), pattern: every},
		{name: "model-softmax", desc: "Softmax of r over each row's selected tokens as the weight, every other layer of 3.",
			catches: gatherCatches, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting = spec.WeightSoftmax }), pattern: every},
		// With g = 1, g·(x + f) = x + g·f: residual_scaled and no_weighting change nothing.
		{name: "model-none", desc: "No weighting, g = 1, every other layer of 3: the routers get gradient only from router_bce.",
			catches: []string{"residual_twice", "unsorted_indices", "capacity_off_by_one"}, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Weighting, c.Aux, c.AuxWeight = spec.WeightNone, spec.AuxRouterBCE, 0.1 }),
			pattern: every},
		{name: "model-jitter", desc: "Training-time jitter r + 0.1·ε in every other layer of 3, ε given as input.jitter.L<l>, sigmoid weighting.",
			catches: gatherCatches, layers: 3,
			routing: with(paper(0.5), func(c *spec.Config) { c.Jitter, c.Weighting = 0.1, spec.WeightSigmoid }), pattern: every},
		{name: "model-mixed-capacities", desc: "Per-layer capacities of other kinds in every other layer of 3: an integer capacity of 3 tokens, then logarithmic scaling (c = 0.25, S_max = 64), with padding.",
			catches: gatherCatches, layers: 3, routing: paper(0.5), pattern: every, valid: []int{8, 6},
			capacities: []spec.Capacity{{Kind: spec.CapacityInteger, Tokens: 3}, {Kind: spec.CapacityLog, Ratio: 0.25, MaxLen: 64}}},
		{name: "model-gqa", desc: "Multi-query attention, one key and value head shared by all 4 query heads (d_h = 4, Wk and Wv 16×4), in a Llama-3-style block (RMSNorm, SwiGLU, RoPE base 500000), layer 0 of 2 routed at capacity 0.5, layer 1 dense, with padding.",
			catches: gatherCatches, layers: 2, routing: spec.DefaultConfig(llamaBlock(1), 0.5), pattern: every, valid: []int{8, 6}},
		{name: "decode-gqa", desc: "Grouped-query attention (4 query heads sharing 2 key and value heads, Llama-3-style block) with causal routing by r > 0 in layer 0 of 2: each layer's cache holds 2 heads of keys and values, and decoding equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 2,
			routing: with(spec.DefaultConfig(llamaBlock(2), 0.5), causal), pattern: every, decode: true},
		{name: "decode-linear-bias", desc: "Causal routing by r > 0 with the linear router with bias and raw weighting, every other layer of 4: decoding equals the full causal forward.",
			catches: []string{"decode_mismatch"}, layers: 4,
			routing: with(paper(0.5), func(c *spec.Config) { causal(c); c.Router, c.Weighting = spec.RouterLinearBias, spec.WeightRaw }),
			pattern: every, decode: true},
	}
	var specs []oracle.ModelSpec
	for _, x := range list {
		cfg, err := spec.NewModelConfig(16, x.maxLen, x.layers, x.routing, x.pattern, x.capacities)
		if err != nil {
			return nil, oracle.Errorf(x.name, err)
		}
		batch := x.batch
		if batch == 0 {
			batch = 2
		}
		specs = append(specs, oracle.ModelSpec{Name: x.name, Description: x.desc, Catches: x.catches, Seed: 1,
			Batch: batch, SeqLen: 8, Valid: x.valid, Config: cfg, Decode: x.decode, Distinct: x.distinct, Ties: x.ties})
	}
	return specs, nil
}

// Tolerancer sets a generated case's float32 tolerances from the
// implementations of the float32 precision profile's family, where they
// need more than the manifests' constants (docs/tolerances.md, "The
// golden corpus"). golden computes its cases from ref and does not import
// mod, which runs the family: modref's commands and the corpus's test pass
// mod/modcase.Float32Tolerances. A nil Tolerancer leaves the constants.
type Tolerancer func(*format.Case) error

// apply runs tol on c, if it is set.
func (tol Tolerancer) apply(c *format.Case) error {
	if tol == nil {
		return nil
	}
	if err := tol(c); err != nil {
		return fmt.Errorf("case %s: float32 tolerances: %w", c.Manifest.Name, err)
	}
	return nil
}

// Generate computes every case of the catalogue from ref, its float32
// tolerances set by tol. With modcase.Float32Tolerances, which computes
// them on the Go loops, the cases are the same bytes on every machine
// (docs/tolerances.md, "The golden corpus").
func Generate(tol Tolerancer) ([]*format.Case, error) {
	var jobs []func() (*format.Case, error)
	for _, s := range layerSpecs() {
		jobs = append(jobs, func() (*format.Case, error) { return genLayer(s) })
	}
	ms, err := modelSpecs()
	if err != nil {
		return nil, err
	}
	for _, s := range ms {
		jobs = append(jobs, func() (*format.Case, error) { return genModel(s) })
	}
	for _, s := range modeSpecs() {
		jobs = append(jobs, func() (*format.Case, error) { return genMoDE(s) })
	}
	// The cases are independent: generated (and their tolerances set) on
	// every core, each the same bits as alone, and returned in order.
	cases := make([]*format.Case, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cases[i], errs[i] = job()
			if errs[i] == nil {
				errs[i] = tol.apply(cases[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return cases, nil
}
