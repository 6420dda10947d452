package diagnose

import (
	"math/bits"
	"slices"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
)

// torchTopKVariant names gather_first_k emulated with top-k's indices in the
// order torch.topk(..., sorted=False) returns them on CPU.
const torchTopKVariant = "torch's CPU order"

// torchCPUTopK is the order in which torch.topk(r, k, sorted=False) returns
// the indices of the k largest values of r on CPU, where k·64 > len(r):
// torch's CPU kernel calls std::nth_element on (value, index) pairs with
// the comparison "greater" and takes the first k, so the order is
// libstdc++'s introselect's (median-of-three pivot, unguarded partition,
// insertion sort of the last range of at most 3). It was checked against
// torch 1.13 on 3000 random rows with ties. ok is false where torch would
// take another path (k·64 ≤ len(r), or introselect's depth limit, which
// falls back to a heap).
func torchCPUTopK(r []float64, k int) (order []int, ok bool) {
	n := len(r)
	if k < 1 || k > n || k*64 <= n {
		return nil, false
	}
	q := make([]int, n)
	for i := range q {
		q[i] = i
	}
	greater := func(a, b int) bool { return r[a] > r[b] }
	first, nth, last := 0, k-1, n
	depth := 2 * (bits.Len(uint(n)) - 1)
	for last-first > 3 {
		if depth == 0 {
			return nil, false
		}
		depth--
		// __move_median_to_first(first, first+1, mid, last−1)
		a, b, c := first+1, first+(last-first)/2, last-1
		var m int
		switch {
		case greater(q[a], q[b]) && greater(q[b], q[c]):
			m = b
		case greater(q[a], q[b]) && greater(q[a], q[c]):
			m = c
		case greater(q[a], q[b]):
			m = a
		case greater(q[a], q[c]):
			m = a
		case greater(q[b], q[c]):
			m = c
		default:
			m = b
		}
		q[first], q[m] = q[m], q[first]
		// __unguarded_partition(first+1, last, pivot at first)
		lo, hi := first+1, last
		for {
			for greater(q[lo], q[first]) {
				lo++
			}
			hi--
			for greater(q[first], q[hi]) {
				hi--
			}
			if lo >= hi {
				break
			}
			q[lo], q[hi] = q[hi], q[lo]
			lo++
		}
		if lo <= nth {
			first = lo
		} else {
			last = lo
		}
	}
	// __insertion_sort(first, last)
	for i := first + 1; i < last; i++ {
		v := q[i]
		if greater(v, q[first]) {
			copy(q[first+1:i+1], q[first:i])
			q[first] = v
			continue
		}
		j := i
		for greater(v, q[j-1]) {
			q[j] = q[j-1]
			j--
		}
		q[j] = v
	}
	return q[:k], true
}

// torchTopKOrder is, for each row of a selection sel of router weights r,
// its positions in torch.topk(sorted=False)'s CPU order over the row's
// valid weights; a row where that order is not known, or whose top k are
// not sel's (ties broken otherwise), keeps descending weight (fallback).
func torchTopKOrder(r [][]float64, sel ref.Selection, valid []int, fallback [][]int) [][]int {
	out := make([][]int, len(sel.Rows))
	for b, row := range sel.Rows {
		o, ok := torchCPUTopK(r[b][:oracle.ValidLen(valid, b, len(r[b]))], len(row))
		if !ok || !slices.Equal(slices.Sorted(slices.Values(o)), row) {
			o = fallback[b]
		}
		out[b] = o
	}
	return out
}
