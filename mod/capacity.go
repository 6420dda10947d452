package mod

import (
	"fmt"
	"math"

	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/spec"
)

// floorSlack is the slack of the float-robust floor of docs/spec.md §3:
// floorRobust(v) is the largest integer k with k <= v + floorSlack, so that
// 0.29·100 = 28.999999999999996 gives 29.
const floorSlack = 1e-9

func floorRobust(v float64) int { return int(math.Floor(v + floorSlack)) }

// Capacity returns k_b, the number of tokens routed in a sequence of n valid
// tokens out of S positions, under rule c (docs/spec.md §3, padding-aware):
//
//   - ratio c:     k = clamp(floor(c·n), 1, n);
//   - integer C:   an error unless 1 <= C <= S, then k = min(C, n);
//   - log scaling: ratio(n) = 1 − (ln n / ln S_max)(1 − c) with ratio(1) = 1,
//     k = clamp(floor(n·ratio(n)), 1, n), an error if n > S_max;
//
// with the float-robust floor, and k = 0 when n = 0.
func Capacity(c spec.Capacity, n, s int) (int, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if n < 0 || n > s {
		return 0, fmt.Errorf("capacity: valid length %d, want 0 <= V_b <= S = %d", n, s)
	}
	switch c.Kind {
	case spec.CapacityInteger:
		if c.Tokens > s {
			return 0, fmt.Errorf("capacity: integer capacity C = %d with sequence length S = %d, want 1 <= C <= S", c.Tokens, s)
		}
		return min(c.Tokens, n), nil
	case spec.CapacityLog:
		if n == 0 {
			return 0, nil
		}
		if n > c.MaxLen {
			return 0, fmt.Errorf("capacity: sequence of %d tokens with log scaling, want at most S_max = MaxLen = %d", n, c.MaxLen)
		}
		ratio := 1.0
		if n > 1 {
			ratio = 1 - float64((elem.Log(float64(n))/elem.Log(float64(c.MaxLen)))*(1-c.Ratio))
		}
		return min(max(floorRobust(float64(float64(n)*ratio)), 1), n), nil
	default: // spec.CapacityRatio
		if n == 0 {
			return 0, nil
		}
		return min(max(floorRobust(float64(c.Ratio*float64(n))), 1), n), nil
	}
}

// AnnealedRatio is the capacity annealing schedule of docs/spec.md §3,
// c(step) = c0 + (c1 − c0)·min(step/warmup, 1), with warmup = 0 meaning c1
// at every step; set it each step with Layer.SetCapacity. Ratios outside
// (0, 1] and negative steps or warmups are errors.
func AnnealedRatio(c0, c1 float64, step, warmup int) (float64, error) {
	if !(c0 > 0 && c0 <= 1) || !(c1 > 0 && c1 <= 1) {
		return 0, fmt.Errorf("mod: capacity annealing: c0 = %v, c1 = %v, want both in (0, 1]", c0, c1)
	}
	if step < 0 || warmup < 0 {
		return 0, fmt.Errorf("mod: capacity annealing: step = %d, warmup = %d, want both >= 0", step, warmup)
	}
	if warmup == 0 {
		return c1, nil
	}
	return c0 + float64((c1-c0)*math.Min(float64(step)/float64(warmup), 1)), nil
}
