package mod

import (
	"fmt"
	"math"
	"slices"
)

// selectTopK is docs/spec.md §4 (paper Eq. 1) for one sequence: the k
// positions among r[0:n] with the largest router weight, equal weights
// ranking the lower position first, appended to dst in ascending order.
// order is a work buffer. A NaN weight is an error naming its position.
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

// selectCausal is docs/spec.md §9 for one sequence: the positions i < n
// with score[i] > 0, in ascending order, appended to dst. A NaN score is an
// error naming its position.
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
