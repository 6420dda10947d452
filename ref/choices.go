package ref

// Choice is one decision ref makes where the contract leaves room, in a form
// a tool can print next to its results, so that the oracle states its choices
// in its output. docs/spec.md states each under "modref's choice", and
// docs/equations.md explains each in full.
type Choice struct {
	Topic  string
	Choice string
}

// Choices lists the decisions ref makes where the contract leaves room.
func Choices() []Choice {
	return []Choice{
		{"capacity floor", "k = largest integer with k <= c*S + 1e-9, then clamp to [1, S]; the same floor for ratio, padding-aware and log rules"},
		{"integer capacity with padding", "1 <= C <= S checked against the padded length, then k_b = min(C, V_b)"},
		{"log capacity", "requires 1 <= S <= S_max, S_max >= 2; monotone in c, not in S"},
		{"selection ties", "equal router weights rank the lower position first; selected positions listed ascending"},
		{"router input", "the layer input x_i, also for MLP-only routing"},
		{"padding", "right padding; padded positions never selected, excluded from every loss and from FLOPs"},
		{"RoPE pairing", "rotate-half: coordinate j with j + d_h/2, theta_j = pos * base^(-2j/d_h), original positions"},
		{"norms", "RMSNorm x/sqrt(mean(x^2)+eps)*gamma; LayerNorm with biased variance; eps from the config (1e-6 default)"},
		{"block", "pre-norm, no biases in attention or MLP (but q, k, v with qkv_bias, added before RoPE), attention scale 1/sqrt(d_h), SwiGLU = (SiLU(xW1) * xW3) W2"},
		{"grouped-query attention", "kv_heads key and value heads (heads by default); query head h reads key and value head floor(h / (heads/kv_heads)): consecutive query heads share one (repeat_interleave, Llama's repeat_kv); Wk, Wv are d x kv_heads*d_h"},
		{"softmax weighting", "over the selected tokens of the row; 0 for the others, also under dense compute"},
		{"load balancing with padding", "padded entries contribute 0; means divide by B"},
		{"predictor", "Linear(d,h)+bias, SiLU, Linear(h,1)+bias on sg(layer input), h = d/2"},
		{"causal routing", "softmax weighting and dense compute rejected; decoder rejects random router and jitter"},
		{"causal targets", "under causal routing tokens are routed by r > 0 or q > 0, but the auxiliary targets stay the top-k choice under the layer's capacity (what the paper trains the router and predictor to predict)"},
		{"decoding cache", "per layer: original positions, RoPE-rotated keys, values (kv_heads heads); routed layers cache only routed tokens, MLP-only attention caches all"},
		{"FLOPs", "matmuls only (2mnk); attention scores over the full n*n square (causal half NOT subtracted), n*min(n, w) with a window w; tokens = valid tokens; router and predictor on every valid token"},
		{"MoDE expert routing", "expert choice (Zhou et al. 2022): gates softmax(N2(h)·W_g) over E experts (+ no-op experts, integrated); each expert takes its k_e = clamp(floor(c_e*n), 1, n) largest gates of a row, ties to the lower position; no load-balancing loss; layer-level, full-sequence only"},
		{"MoDE forms", "staged: MoD top-k (linear router, raw weighting, gather) around attention + experts, out = x + r(a + m); integrated: dense attention, out = x + a + m, no-op experts add 0"},
		{"init", "math/rand/v2 PCG(seed, seed^0x9e3779b97f4a7c15); weights N(0, 1/d_in); gains 1+N(0, 0.01)"},
		{"gradients", "ref's analytic float64 backward passes, routing decision and stop-gradient constants frozen; held in ref's tests to gonum diff/fd central differences, step 1e-5"},
	}
}
