package spec

import (
	"bytes"
	"encoding/json"
	"math"
)

// MoDEForm names one of the two Mixture-of-Depths-and-Experts layers of
// docs/spec.md §14.
type MoDEForm string

// MoDE forms (docs/spec.md §14).
const (
	// MoDEStaged routes tokens around the whole block with an MoD router
	// (top-k of §4), and the routed tokens' MLP is a mixture of experts.
	MoDEStaged MoDEForm = "staged"
	// MoDEIntegrated runs attention densely; the MLP is a mixture of
	// experts among which no-op experts stand for skipping it.
	MoDEIntegrated MoDEForm = "integrated"
)

// MoDEConfig is one Mixture-of-Depths-and-Experts layer (docs/spec.md §14).
// It is a layer on its own, not a layer of a ModelConfig. Expert routing is
// expert choice: each expert takes the k_e tokens of a row with the largest
// gate for it.
type MoDEConfig struct {
	// Block is the attention's shape and each expert's MLP shape (Block.DFF
	// is one expert's width).
	Block BlockConfig
	// Form is staged or integrated.
	Form MoDEForm
	// Experts is E, the number of conventional MLP experts, >= 1.
	Experts int
	// NoOpExperts is the number of no-op experts: >= 1 for the integrated
	// form, 0 for the staged form.
	NoOpExperts int
	// Capacity is the staged form's MoD capacity ratio c in (0, 1]
	// (docs/spec.md §3, fixed ratio); 0 for the integrated form.
	Capacity float64
	// ExpertCapacity is c_e in (0, 1]: each expert takes
	// k_e = clamp(floor(c_e·n), 1, n) tokens of a row of n tokens.
	ExpertCapacity float64
}

// GateWidth is the number of gates per token: E, plus the no-op experts in
// the integrated form.
func (c MoDEConfig) GateWidth() int { return c.Experts + c.NoOpExperts }

// Validate reports the first invalid field of c, naming it, its value and
// what is allowed (a *FieldError).
func (c MoDEConfig) Validate() error {
	if err := c.Block.Validate(); err != nil {
		return err.(*FieldError).in("mode", "")
	}
	const m = "mode"
	ratio := func(field, key string, v float64) error {
		if !(v > 0 && v <= 1) || math.IsInf(v, 0) {
			return invalid(m, "{"+field+"|"+key+"} = %v, want a ratio in (0, 1]", v)
		}
		return nil
	}
	if c.Experts < 1 {
		return invalid(m, "{Experts|experts} = %d, want E >= 1", c.Experts)
	}
	if err := checkMax(m, "Experts", "experts", c.Experts, MaxExperts, "MaxExperts"); err != nil {
		return err
	}
	if err := checkMax(m, "NoOpExperts", "noop_experts", c.NoOpExperts, MaxExperts, "MaxExperts"); err != nil {
		return err
	}
	if err := ratio("ExpertCapacity", "expert_capacity", c.ExpertCapacity); err != nil {
		return err
	}
	switch c.Form {
	case MoDEStaged:
		if c.NoOpExperts != 0 {
			return invalid(m, "{NoOpExperts|noop_experts} = %d with {Form|form} = staged, want 0: the staged form skips by its MoD router, no-op experts belong to the integrated form (docs/spec.md §14)", c.NoOpExperts)
		}
		if err := ratio("Capacity", "capacity", c.Capacity); err != nil {
			return err
		}
	case MoDEIntegrated:
		if c.NoOpExperts < 1 {
			return invalid(m, "{NoOpExperts|noop_experts} = %d with {Form|form} = integrated, want >= 1 (docs/spec.md §14)", c.NoOpExperts)
		}
		if c.Capacity != 0 {
			return invalid(m, "{Capacity|capacity} = %v with {Form|form} = integrated, want 0: the integrated form has no MoD router; its experts' capacity is {ExpertCapacity|expert_capacity}", c.Capacity)
		}
	default:
		return invalid(m, "{Form|form} = %q, want staged or integrated", c.Form)
	}
	return nil
}

// modeJSON is the JSON form of a MoDEConfig: the block's fields and the
// MoDE fields side by side (docs/golden-format.md, "config").
type modeJSON struct {
	blockJSON
	Form           MoDEForm `json:"form"`
	Experts        int      `json:"experts"`
	NoOpExperts    int      `json:"noop_experts"`
	Capacity       float64  `json:"capacity"`
	ExpertCapacity float64  `json:"expert_capacity"`
}

// MarshalJSON writes c flat, block and MoDE fields together.
func (c MoDEConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(modeJSON{
		blockJSON: blockJSONOf(c.Block),
		Form:      c.Form, Experts: c.Experts, NoOpExperts: c.NoOpExperts,
		Capacity: c.Capacity, ExpertCapacity: c.ExpertCapacity,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes; a key it does not know is
// an error. It does not validate: that is Validate's job.
func (c *MoDEConfig) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j modeJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*c = MoDEConfig{
		Block: j.config(),
		Form:  j.Form, Experts: j.Experts, NoOpExperts: j.NoOpExperts,
		Capacity: j.Capacity, ExpertCapacity: j.ExpertCapacity,
	}
	return nil
}
