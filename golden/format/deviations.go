package format

import (
	"strings"
)

// Deviation is one of the known departures from the paper's equations
// (docs/spec.md §11) that the oracle tells apart.
type Deviation struct {
	Name        string
	Description string
}

// Deviations lists docs/spec.md §11 in order, with the names manifests use
// in "catches".
var Deviations = []Deviation{
	{"residual_twice", "residual counted twice: out = x + g·(x + f), the block returned its own residual"},
	{"residual_scaled", "residual scaled: out = g·(x + f) for selected tokens"},
	{"unsorted_indices", "indices not sorted before the block: the causal mask follows router-score order, not positions"},
	{"no_weighting", "no weighting: out = x + f, so the router gets no gradient from the LM loss"},
	{"ste_m_plus_1", "straight-through weight w = g·m + (g − sg(g)), whose derivative is m + 1 instead of 1"},
	{"predictor_no_stopgrad", "predictor fed x without stop-gradient: its loss sends gradient into the trunk"},
	{"predictor_block_output", "predictor fed the block output instead of the layer input"},
	{"capacity_off_by_one", "capacity off by one: a strict '>' against the k-th router weight, {i : r_i > r_(k)}, selects k − 1 tokens, fewer when weights tie with the k-th (each tied one is dropped)"},
	{"decode_mismatch", "incremental decoding differs from the full causal forward (misaligned cache, skipped tokens cached, or routing off at inference)"},
	{"window_gathered_indices", "sliding attention window counted in indices of the gathered subset instead of original positions: a selected token attends to the last w selected tokens, however far back"},
	{"rope_gathered_indices", "RoPE applied at the gathered indices 0..k−1 instead of the tokens' original positions (the block called on the gathered tensor with the first k rotary angles)"},
	{"targets_first_row", "auxiliary targets scattered into a flat B·S vector by position: every row's selected positions mark row 0, the other rows' targets stay 0"},
	{"weight_mlp_only", "router weight on the MLP's update only: out = x + a + g·m for a selected token, a the attention's update and m the MLP's, instead of x + g·(a + m)"},
	{"gather_first_k", "argsort(top-k indices) gathered in place of the sorted indices: the block runs on positions 0..k−1 (in the order argsort puts them, the causal mask following it), the t-th weighted by the t-th selected token's weight and written back at its own position"},
	{"capacity_floor_zero", "capacity k = int(c·V): a plain floor, neither float-robust nor clamped to 1, so a short row gets k = 0 (and 0.29·100 gives 28)"},
	{"no_causal_mask", "no causal mask in the gathered block: each selected token attends to every selected token of its row, later ones included"},
	{"mode_ungated_experts", "MoDE experts' outputs summed without their gates: m = Σ MLP_e(u) over the experts that chose the token, instead of Σ G_e·MLP_e(u), so the expert router gets no gradient from the output"},
	{"shared_router", "one router shared by every routed layer of a model: each routed layer's router weights are computed with the same parameters (the first routed layer's), whose gradient sums over the layers"},
	{"tanh_gate", "p-MoD's TanhNorm in place of the configured weighting: g = 1 + α·tanh(r) with α = 0.2 at every valid token, so out = x + (1 + α·tanh(r))·f for a selected token"},
	{"skipped_scaled", "p-MoD's STRing: a valid token outside the selection is scaled by its weight, out = g·x, instead of passing unchanged, so the router learns from the skipped tokens too"},
	{"aux_over_padding", "auxiliary losses over padding: each padded position counts as a valid token that is never selected, its router weight (or predictor logit) in each BCE mean against target 0 (the means over B·S) and σ(r) in load balancing's P_s"},
	{"softmax_whole_row", "softmax weighting taken over every valid token of the row instead of the selected ones: a selected token's g = exp(r_i) / Σ_valid exp(r_j)"},
	{"qk_swapped", "queries and keys swapped: token i attends to j by k_i·q_j instead of q_i·k_j, in every block of the model (the attention's code is shared)"},
	{"weight_scaled", "router weight scaled by a constant α: every valid token's weight is α·g, so out = x + α·g·f for a selected token (α fitted to the candidate's arrays)"},
	{"router_normed_input", "the router reads the block's normed input N1(x) instead of the residual stream x: r = w·N1(x), which decides the routing and the weights"},
}

// DeviationDescription returns the description of a deviation name, or "";
// for deviations joined with "+" (a combination Diagnose names), their
// descriptions joined with "; and ".
func DeviationDescription(name string) string {
	if parts := strings.Split(name, "+"); len(parts) > 1 {
		ds := make([]string, len(parts))
		for i, p := range parts {
			if ds[i] = DeviationDescription(p); ds[i] == "" {
				return ""
			}
		}
		return strings.Join(ds, "; and ")
	}
	for _, d := range Deviations {
		if d.Name == name {
			return d.Description
		}
	}
	return ""
}
