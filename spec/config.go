package spec

import (
	"math"
)

// RouterKind names a router variant of docs/spec.md §2.
type RouterKind string

// Router variants (docs/spec.md §2).
const (
	// RouterLinear is the paper's router r_i = w·x_i (Sec. 3.4).
	RouterLinear RouterKind = "linear"
	// RouterLinearBias is r_i = w·x_i + b.
	RouterLinearBias RouterKind = "linear_bias"
	// RouterL2Norm is the parameter-free r_i = ||x_i||_2.
	RouterL2Norm RouterKind = "l2norm"
	// RouterRandom is the paper's stochastic baseline: r_i is an explicit
	// N(0,1) noise input.
	RouterRandom RouterKind = "random"
)

// Weighting names the output weight g of docs/spec.md §6.
type Weighting string

// Output weightings (docs/spec.md §6).
const (
	// WeightRaw is the paper's g_i = r_i.
	WeightRaw Weighting = "raw"
	// WeightSigmoid is g_i = sigma(r_i).
	WeightSigmoid Weighting = "sigmoid"
	// WeightSoftmax is g_i = softmax of r over the selected tokens of the row.
	WeightSoftmax Weighting = "softmax"
	// WeightNone is g_i = 1.
	WeightNone Weighting = "none"
)

// Compute names how the routed block is evaluated.
type Compute string

// Compute modes.
const (
	// ComputeGather runs f on the selected tokens only (docs/spec.md §5).
	ComputeGather Compute = "gather"
	// ComputeDense runs f on every valid token and uses the straight-through
	// weight of docs/spec.md §7.
	ComputeDense Compute = "dense"
)

// AuxObjective names the auxiliary objective of docs/spec.md §8.
type AuxObjective string

// Auxiliary objectives (docs/spec.md §8).
const (
	// AuxNone adds no auxiliary loss.
	AuxNone AuxObjective = "none"
	// AuxRouterBCE is BCE-with-logits of the router weights against the targets.
	AuxRouterBCE AuxObjective = "router_bce"
	// AuxPredictor trains a separate MLP predictor on sg(x).
	AuxPredictor AuxObjective = "predictor"
)

// CausalRouting names the sampling-time routing rule of docs/spec.md §9.
type CausalRouting string

// Causal routing rules (docs/spec.md §9).
const (
	// CausalOff routes by top-k over the row (training-time rule, non-causal).
	CausalOff CausalRouting = "off"
	// CausalRouter routes token i iff r_i > 0.
	CausalRouter CausalRouting = "router"
	// CausalPredictor routes token i iff q_i > 0.
	CausalPredictor CausalRouting = "predictor"
)

// NormKind names the normalisation N of docs/spec.md §5.
type NormKind string

// Normalisations (docs/spec.md §5).
const (
	// NormRMS is x / sqrt(mean(x^2) + eps) * gamma.
	NormRMS NormKind = "rmsnorm"
	// NormLayer is (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta.
	NormLayer NormKind = "layernorm"
)

// Activation names the MLP of docs/spec.md §5.
type Activation string

// MLP activations (docs/spec.md §5).
const (
	// ActGELU is W2 GELU(W1 x) with the erf form of GELU.
	ActGELU Activation = "gelu"
	// ActSwiGLU is W2 (SiLU(W1 x) * (W3 x)).
	ActSwiGLU Activation = "swiglu"
)

// PositionKind names how positions enter the model (docs/spec.md §5).
type PositionKind string

// Position encodings (docs/spec.md §5).
const (
	// PositionRoPE rotates queries and keys by each token's original position.
	PositionRoPE PositionKind = "rope"
	// PositionLearned adds a learned absolute embedding of the position to the
	// token embedding at the input; attention is then position-free.
	PositionLearned PositionKind = "learned"
)

// BlockConfig is the shape of one pre-norm transformer block (docs/spec.md
// §5), shared by routed and dense layers.
type BlockConfig struct {
	D     int // model width d
	Heads int // H; d_h = D/Heads must be even for RoPE
	// KVHeads is the number of key and value heads of grouped-query
	// attention (docs/spec.md §5): it divides Heads, and each group of
	// Heads/KVHeads query heads shares one key head and one value head. 0
	// means Heads (multi-head attention); use KVHeadCount.
	KVHeads int
	// QKVBias adds biases b_q, b_k, b_v to the query, key and value
	// projections (Qwen's blocks; docs/spec.md §5). Wo and the MLP have none.
	QKVBias  bool
	DFF      int        // MLP width d_ff
	Norm     NormKind   // RMSNorm (default) or LayerNorm
	NormEps  float64    // eps inside the norm; must be > 0
	MLP      Activation // GELU (default) or SwiGLU
	RoPEBase float64    // rotary base; 10000 in docs/spec.md
	// Positions is rope (default) or learned absolute embeddings at the input.
	Positions PositionKind
	// Window, when positive, is the sliding attention window w of
	// docs/spec.md §13: a token at original position p attends to the
	// tokens of its sequence (in a routed block, the selected ones) at
	// positions in (p − w, p]. 0 means no window.
	Window int
}

// DefaultBlockConfig returns the docs/spec.md defaults (RMSNorm with eps 1e-6,
// GELU, RoPE base 10000) for the given sizes.
func DefaultBlockConfig(d, heads, dff int) BlockConfig {
	return BlockConfig{D: d, Heads: heads, DFF: dff, Norm: NormRMS, NormEps: 1e-6, MLP: ActGELU, RoPEBase: 10000, Positions: PositionRoPE}
}

// KVHeadCount is the number of key and value heads: KVHeads, or Heads when
// KVHeads is 0.
func (c BlockConfig) KVHeadCount() int {
	if c.KVHeads == 0 {
		return c.Heads
	}
	return c.KVHeads
}

// KVWidth is the width of a token's keys (and of its values):
// KVHeadCount·d_h, which is D without grouped-query attention.
func (c BlockConfig) KVWidth() int { return c.KVHeadCount() * (c.D / c.Heads) }

// Validate reports the first invalid field of c (a *FieldError).
func (c BlockConfig) Validate() error {
	const b = "block"
	switch {
	case c.D < 1:
		return invalid(b, "{D|d_model} = %d, want >= 1", c.D)
	case c.D > MaxD:
		return checkMax(b, "D", "d_model", c.D, MaxD, "MaxD")
	case c.Heads < 1:
		return invalid(b, "{Heads|heads} = %d, want >= 1", c.Heads)
	case c.D%c.Heads != 0:
		return invalid(b, "{D|d_model} = %d is not a multiple of {Heads|heads} = %d", c.D, c.Heads)
	case (c.D/c.Heads)%2 != 0:
		return invalid(b, "head width {D/Heads|d_model/heads} = %d is odd; rotary embeddings pair coordinates and need it even", c.D/c.Heads)
	case c.KVHeads < 0 || (c.KVHeads > 0 && c.Heads%c.KVHeads != 0):
		return invalid(b, "{KVHeads (kv_heads)|kv_heads} = %d, want a divisor of {Heads|heads} = %d (each key and value head serves {Heads/KVHeads|heads/kv_heads} query heads, docs/spec.md §5), or 0 for {Heads|heads}", c.KVHeads, c.Heads)
	case c.DFF < 1:
		return invalid(b, "{DFF|d_ff} = %d, want >= 1", c.DFF)
	case c.DFF > MaxDFF:
		return checkMax(b, "DFF", "d_ff", c.DFF, MaxDFF, "MaxDFF")
	case c.Norm != NormRMS && c.Norm != NormLayer:
		return invalid(b, "{Norm|norm} = %q, want %q or %q", c.Norm, NormRMS, NormLayer)
	case !(c.NormEps > 0) || math.IsInf(c.NormEps, 0):
		return invalid(b, "{NormEps|norm_eps} = %v, want a finite value > 0 (1e-6 is the default)", c.NormEps)
	case c.MLP != ActGELU && c.MLP != ActSwiGLU:
		return invalid(b, "{MLP|mlp} = %q, want %q or %q", c.MLP, ActGELU, ActSwiGLU)
	case c.Positions != PositionRoPE && c.Positions != PositionLearned:
		return invalid(b, "{Positions|positions} = %q, want %q or %q", c.Positions, PositionRoPE, PositionLearned)
	case c.Positions == PositionRoPE && (!(c.RoPEBase > 1) || math.IsInf(c.RoPEBase, 0)):
		return invalid(b, "{RoPEBase|rope_base} = %v, want a finite value > 1 (10000 in docs/spec.md)", c.RoPEBase)
	case c.Window < 0:
		return invalid(b, "{Window|window} = %d, want 0 (no window) or a positive number of positions (docs/spec.md §13)", c.Window)
	}
	return nil
}

// Config is one routed layer: the block shape plus every routing choice of
// docs/spec.md §2 to §9, named with its words.
type Config struct {
	Block BlockConfig

	Router RouterKind // §2
	// Jitter is the scale s of the training-time jitter r_i + s*eps_i
	// (§2); 0 disables it. eps is an explicit input.
	Jitter float64

	Capacity  Capacity  // §3
	Weighting Weighting // §6
	Compute   Compute   // gather (§5) or dense with straight-through (§7)
	// MLPOnly routes only the MLP; attention runs densely (§5).
	MLPOnly bool

	Aux AuxObjective // §8
	// AuxWeight is lambda, the weight of the auxiliary loss in the total.
	AuxWeight float64
	// LoadBalanceWeight weighs the load-balancing loss (§8); 0 disables it.
	LoadBalanceWeight float64
	// PredictorHidden is h of the predictor; 0 means the default d/2.
	PredictorHidden int

	Causal CausalRouting // §9
}

// DefaultConfig returns the paper's routed layer: linear router, capacity
// ratio c, raw weighting, gather compute, no auxiliary loss, top-k routing.
func DefaultConfig(block BlockConfig, c float64) Config {
	return Config{
		Block:     block,
		Router:    RouterLinear,
		Capacity:  Capacity{Kind: CapacityRatio, Ratio: c},
		Weighting: WeightRaw,
		Compute:   ComputeGather,
		Aux:       AuxNone,
		Causal:    CausalOff,
	}
}

// PredictorWidth is h, the predictor's hidden width (d/2 unless set).
func (c Config) PredictorWidth() int {
	if c.PredictorHidden > 0 {
		return c.PredictorHidden
	}
	return max(1, c.Block.D/2)
}

// HasPredictor reports whether the layer owns predictor parameters.
func (c Config) HasPredictor() bool {
	return c.Aux == AuxPredictor || c.Causal == CausalPredictor
}

// Validate reports the first invalid field of c, naming it, its value and
// what is allowed (a *FieldError).
func (c Config) Validate() error {
	if err := c.Block.Validate(); err != nil {
		return err
	}
	const cf = "config"
	switch c.Router {
	case RouterLinear, RouterLinearBias, RouterL2Norm, RouterRandom:
	default:
		return invalid(cf, "{Router|router} = %q, want one of linear, linear_bias, l2norm, random", c.Router)
	}
	if !(c.Jitter >= 0) || math.IsInf(c.Jitter, 0) {
		return invalid(cf, "{Jitter|jitter} = %v, want a finite value >= 0", c.Jitter)
	}
	// Causal routing has no capacity limit, but its auxiliary targets are
	// still the top-k choice under the capacity, so the rule is always needed.
	if err := c.Capacity.validate(); err != nil {
		return err.in(cf, "capacity.")
	}
	switch c.Weighting {
	case WeightRaw, WeightSigmoid, WeightSoftmax, WeightNone:
	default:
		return invalid(cf, "{Weighting|weighting} = %q, want one of raw, sigmoid, softmax, none", c.Weighting)
	}
	switch c.Compute {
	case ComputeGather, ComputeDense:
	default:
		return invalid(cf, "{Compute|compute} = %q, want gather or dense", c.Compute)
	}
	switch c.Aux {
	case AuxNone, AuxRouterBCE, AuxPredictor:
	default:
		return invalid(cf, "{Aux|aux} = %q, want one of none, router_bce, predictor", c.Aux)
	}
	if !(c.AuxWeight >= 0) || math.IsInf(c.AuxWeight, 0) {
		return invalid(cf, "{AuxWeight|aux_weight} = %v, want a finite value >= 0", c.AuxWeight)
	}
	if c.AuxWeight > 0 && c.Aux == AuxNone {
		return invalid(cf, "{AuxWeight|aux_weight} = %v with {Aux|aux} = none would be ignored; set {Aux|aux} to router_bce or predictor, or {AuxWeight|aux_weight} to 0", c.AuxWeight)
	}
	if !(c.LoadBalanceWeight >= 0) || math.IsInf(c.LoadBalanceWeight, 0) {
		return invalid(cf, "{LoadBalanceWeight|load_balance_weight} = %v, want a finite value >= 0", c.LoadBalanceWeight)
	}
	if c.PredictorHidden < 0 {
		return invalid(cf, "{PredictorHidden|predictor_hidden} = %d, want >= 0 (0 means d/2)", c.PredictorHidden)
	}
	if err := checkMax(cf, "PredictorHidden", "predictor_hidden", c.PredictorHidden, MaxDFF, "MaxDFF"); err != nil {
		return err
	}
	switch c.Causal {
	case CausalOff:
	case CausalRouter, CausalPredictor:
		if c.Weighting == WeightSoftmax {
			return invalid(cf, "{Weighting|weighting} = softmax with {Causal|causal} = %q: softmax over the selected tokens makes a token's output depend on later tokens, so it is rejected in causal routing (docs/spec.md §9); use raw, sigmoid or none", c.Causal)
		}
		if c.Compute == ComputeDense {
			return invalid(cf, "{Compute|compute} = dense with {Causal|causal} = %q: dense compute runs f on every token, so per-layer caches could not hold only the routed tokens (docs/spec.md §9); use gather", c.Causal)
		}
	default:
		return invalid(cf, "{Causal|causal} = %q, want off, router or predictor", c.Causal)
	}
	return nil
}
