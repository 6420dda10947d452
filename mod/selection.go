package mod

import (
	"fmt"
	"math"
	"slices"
)

// SelectTopK is docs/spec.md §4 (paper Eq. 1) for one sequence: the k
// positions among r with the largest router weight, equal weights ranking the
// lower position first, in ascending order. A NaN weight, or k outside
// [0, len(r)], is an error.
func SelectTopK(r []float32, k int) ([]int, error) {
	if k < 0 || k > len(r) {
		return nil, fmt.Errorf("top-k: k = %d, want 0 <= k <= n = %d", k, len(r))
	}
	sel, _, err := selectTopK([]int{}, nil, r, k)
	return sel, err
}

// SelectCausal is docs/spec.md §9 for one sequence: the positions i with
// score[i] > 0, in ascending order. A NaN score is an error naming its
// position.
func SelectCausal(score []float32) ([]int, error) {
	return selectCausal([]int{}, score)
}

// selectTopK is SelectTopK appending to dst, with order a work buffer; the
// caller guarantees 0 <= k <= len(r).
func selectTopK(dst, order []int, r []float32, k int) ([]int, []int, error) {
	for i, v := range r {
		if math.IsNaN(float64(v)) {
			return dst, order, fmt.Errorf("router weight is NaN at position %d", i)
		}
	}
	order = order[:0]
	for i := range r {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case r[a] > r[b]:
			return -1
		case r[a] < r[b]:
			return 1
		}
		return a - b
	})
	start := len(dst)
	dst = append(dst, order[:k]...)
	slices.Sort(dst[start:])
	return dst, order, nil
}

// selectCausal is SelectCausal appending to dst.
func selectCausal(dst []int, score []float32) ([]int, error) {
	for i, v := range score {
		if math.IsNaN(float64(v)) {
			return dst, fmt.Errorf("causal routing score is NaN at position %d", i)
		}
		if v > 0 {
			dst = append(dst, i)
		}
	}
	return dst, nil
}
