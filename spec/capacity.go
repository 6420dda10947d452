package spec

// CapacityKind names a capacity rule of docs/spec.md §3.
type CapacityKind string

// Capacity rules (docs/spec.md §3).
const (
	// CapacityRatio is a fixed ratio c in (0,1]: k = clamp(floor(c*S), 1, S).
	CapacityRatio CapacityKind = "ratio"
	// CapacityInteger is the paper's capacity per batch element: k = C.
	CapacityInteger CapacityKind = "integer"
	// CapacityLog scales the ratio with the sequence length:
	// ratio(S) = 1 - (ln S / ln S_max)(1 - c).
	CapacityLog CapacityKind = "log"
)

// Capacity is the capacity rule of one routed layer (docs/spec.md §3). Its
// JSON keys are the spec's names; the fields a rule does not use are left out.
type Capacity struct {
	Kind   CapacityKind `json:"kind"`
	Ratio  float64      `json:"ratio,omitempty"`   // c, for CapacityRatio and CapacityLog; in (0, 1]
	Tokens int          `json:"tokens,omitempty"`  // C, for CapacityInteger; 1 <= C <= S
	MaxLen int          `json:"max_len,omitempty"` // S_max, for CapacityLog; >= 2, and S <= S_max
}

// Validate reports an invalid field of the rule (the checks that do not
// depend on the sequence length), a *FieldError.
func (c Capacity) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	return nil
}

// validate is Validate with its error's type.
func (c Capacity) validate() *FieldError {
	const cp = "capacity"
	switch c.Kind {
	case CapacityRatio, CapacityLog:
		if !(c.Ratio > 0 && c.Ratio <= 1) {
			return invalid(cp, "{Ratio|ratio} = %v, want c in (0, 1]", c.Ratio)
		}
		if c.Kind == CapacityLog && c.MaxLen < 2 {
			return invalid(cp, "{MaxLen|max_len} = %d for log scaling, want S_max >= 2 (ln S_max is a divisor)", c.MaxLen)
		}
	case CapacityInteger:
		if c.Tokens < 1 {
			return invalid(cp, "{Tokens|tokens} = %d, want C >= 1", c.Tokens)
		}
	default:
		return invalid(cp, "{Kind|kind} = %q, want ratio, integer or log", c.Kind)
	}
	return nil
}
