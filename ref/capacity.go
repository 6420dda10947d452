package ref

import (
	"fmt"
	"math"

	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/spec"
)

// FloorSlack is the slack of the float-robust floor: FloorRobust(v) is the
// largest integer k with k <= v + FloorSlack (docs/spec.md §3).
const FloorSlack = 1e-9

// FloorRobust returns the largest integer k with k <= v + FloorSlack, so that
// 0.29*100 = 28.999999999999996 floors to 29 (docs/spec.md §3).
func FloorRobust(v float64) int {
	return int(math.Floor(v + FloorSlack))
}

func clampInt(k, lo, hi int) int {
	return min(max(k, lo), hi)
}

// CapacityFromRatio is docs/spec.md §3, fixed ratio:
// k = clamp(FloorRobust(c*S), 1, S).
func CapacityFromRatio(c float64, s int) (int, error) {
	if s < 1 {
		return 0, fmt.Errorf("capacity: sequence length S = %d, want >= 1", s)
	}
	if !(c > 0 && c <= 1) {
		return 0, fmt.Errorf("capacity: ratio c = %v, want c in (0, 1]", c)
	}
	return clampInt(FloorRobust(float64(c*float64(s))), 1, s), nil
}

// CapacityFromInteger is docs/spec.md §3, integer capacity (the paper's
// capacity per batch element): k = C, an error unless 1 <= C <= S.
func CapacityFromInteger(capTokens, s int) (int, error) {
	if capTokens < 1 || capTokens > s {
		return 0, fmt.Errorf("capacity: integer capacity C = %d with sequence length S = %d, want 1 <= C <= S", capTokens, s)
	}
	return capTokens, nil
}

// LogCapacityRatio is docs/spec.md §3, logarithmic scaling:
// ratio(S) = 1 - (ln S / ln S_max)(1 - c), with ratio(1) = 1.
func LogCapacityRatio(c float64, s, maxLen int) (float64, error) {
	if !(c > 0 && c <= 1) {
		return 0, fmt.Errorf("capacity: ratio c = %v, want c in (0, 1]", c)
	}
	if maxLen < 2 {
		return 0, fmt.Errorf("capacity: S_max = %d, want >= 2", maxLen)
	}
	if s < 1 || s > maxLen {
		return 0, fmt.Errorf("capacity: sequence length S = %d with log scaling, want 1 <= S <= S_max = %d", s, maxLen)
	}
	if s == 1 {
		return 1, nil
	}
	return 1 - float64((elem.Log(float64(s))/elem.Log(float64(maxLen)))*(1-c)), nil
}

// CapacityFromLog is docs/spec.md §3, logarithmic scaling:
// k = clamp(FloorRobust(S*ratio(S)), 1, S). The float-robust floor of the
// fixed ratio is used here too.
func CapacityFromLog(c float64, s, maxLen int) (int, error) {
	ratio, err := LogCapacityRatio(c, s, maxLen)
	if err != nil {
		return 0, err
	}
	return clampInt(FloorRobust(float64(float64(s)*ratio)), 1, s), nil
}

// TokensFor returns k for a row of n valid tokens under rule c; a row with
// n = 0 valid tokens gets k = 0. For the integer rule, C is first checked
// against the padded length s (1 <= C <= s) and then k = min(C, n), a choice
// the contract leaves open (docs/spec.md §3).
func TokensFor(c spec.Capacity, n, s int) (int, error) {
	if n < 0 || n > s {
		return 0, fmt.Errorf("capacity: valid length %d, want 0 <= V_b <= S = %d", n, s)
	}
	switch c.Kind {
	case spec.CapacityRatio:
		if n == 0 {
			return 0, nil
		}
		return CapacityFromRatio(c.Ratio, n)
	case spec.CapacityInteger:
		k, err := CapacityFromInteger(c.Tokens, s)
		if err != nil {
			return 0, err
		}
		return min(k, n), nil
	case spec.CapacityLog:
		if n == 0 {
			return 0, nil
		}
		return CapacityFromLog(c.Ratio, n, c.MaxLen)
	}
	return 0, c.Validate()
}

// RowCapacities is the padding-aware capacity of docs/spec.md §3: k_b for
// each of the b rows, where row b has valid[b] valid tokens (nil valid: all
// s positions of every row are valid). k_b = 0 when V_b = 0.
func RowCapacities(c spec.Capacity, rows, s int, valid []int) ([]int, error) {
	if err := checkValid(valid, rows, s); err != nil {
		return nil, err
	}
	k := make([]int, rows)
	for b := range k {
		kb, err := TokensFor(c, validLen(valid, b, s), s)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", b, err)
		}
		k[b] = kb
	}
	return k, nil
}

// AnnealedRatio is docs/spec.md §3, capacity annealing:
// c(step) = c0 + (c1 - c0) * min(step/warmup, 1). warmup = 0 means c1 at
// every step.
func AnnealedRatio(c0, c1 float64, step, warmup int) (float64, error) {
	if !(c0 > 0 && c0 <= 1) || !(c1 > 0 && c1 <= 1) {
		return 0, fmt.Errorf("capacity annealing: c0 = %v, c1 = %v, want both in (0, 1]", c0, c1)
	}
	if step < 0 || warmup < 0 {
		return 0, fmt.Errorf("capacity annealing: step = %d, warmup = %d, want both >= 0", step, warmup)
	}
	if warmup == 0 {
		return c1, nil
	}
	return c0 + float64((c1-c0)*math.Min(float64(step)/float64(warmup), 1)), nil
}

// checkValid checks a valid-length slice against the batch shape.
func checkValid(valid []int, rows, s int) error {
	if valid == nil {
		return nil
	}
	if len(valid) != rows {
		return fmt.Errorf("valid lengths: len(valid) = %d, want one per batch row (B = %d)", len(valid), rows)
	}
	for b, v := range valid {
		if v < 0 || v > s {
			return fmt.Errorf("valid lengths: valid[%d] = %d, want 0 <= V_b <= S = %d", b, v, s)
		}
	}
	return nil
}

// validLen returns V_b (s when valid is nil).
func validLen(valid []int, b, s int) int {
	if valid == nil {
		return s
	}
	return valid[b]
}
