package ref

import (
	"fmt"
	"math"
	"sort"
)

// Selection is a routing decision: for each batch row, the positions routed
// through the block, in ascending order. It is the value that is frozen for
// finite differences.
type Selection struct {
	S    int     // sequence length
	Rows [][]int // Rows[b] = ascending positions selected in row b
}

// Mask returns m[b][i] = 1 if position i of row b is selected, else 0.
func (s Selection) Mask() [][]float64 {
	m := make([][]float64, len(s.Rows))
	for b, pos := range s.Rows {
		m[b] = make([]float64, s.S)
		for _, i := range pos {
			m[b][i] = 1
		}
	}
	return m
}

// Count returns the number of selected tokens over all rows.
func (s Selection) Count() int {
	n := 0
	for _, pos := range s.Rows {
		n += len(pos)
	}
	return n
}

// Validate checks that every row holds distinct ascending positions in
// [0, valid length), so a hand-made frozen selection cannot be malformed.
func (s Selection) Validate(rows int, valid []int) error {
	if len(s.Rows) != rows {
		return fmt.Errorf("selection: %d rows, want B = %d", len(s.Rows), rows)
	}
	for b, pos := range s.Rows {
		v := validLen(valid, b, s.S)
		for j, i := range pos {
			if i < 0 || i >= v {
				return fmt.Errorf("selection: row %d entry %d is position %d, want 0 <= i < V_b = %d", b, j, i, v)
			}
			if j > 0 && i <= pos[j-1] {
				return fmt.Errorf("selection: row %d positions %d then %d are not strictly ascending", b, pos[j-1], i)
			}
		}
	}
	return nil
}

// checkNoNaN rejects NaN values of a per-token field, naming row and position.
func checkNoNaN(name string, r [][]float64, valid []int) error {
	for b, row := range r {
		for i := 0; i < validLen(valid, b, len(row)); i++ {
			if math.IsNaN(row[i]) {
				return fmt.Errorf("%s is NaN at row %d, position %d", name, b, i)
			}
		}
	}
	return nil
}

// SelectTopK is docs/spec.md §4 (paper Eq. 1): in each row b, the k[b]
// valid tokens with the largest router weight r, ties broken by the lower
// position, listed in ascending position order. Padded positions (i >= V_b)
// are never selected. A NaN router weight at a valid position is an error
// naming its row and position.
func SelectTopK(r [][]float64, k []int, valid []int) (Selection, error) {
	if len(r) == 0 {
		return Selection{}, fmt.Errorf("selection: router weights have 0 rows, want B >= 1")
	}
	s := len(r[0])
	if err := checkShape2("router weights", r, len(r), s); err != nil {
		return Selection{}, err
	}
	if len(k) != len(r) {
		return Selection{}, fmt.Errorf("selection: %d capacities for %d rows, want one per row", len(k), len(r))
	}
	if err := checkValid(valid, len(r), s); err != nil {
		return Selection{}, err
	}
	if err := checkNoNaN("router weight", r, valid); err != nil {
		return Selection{}, fmt.Errorf("selection: %w", err)
	}
	sel := Selection{S: s, Rows: make([][]int, len(r))}
	for b, row := range r {
		v := validLen(valid, b, s)
		if k[b] < 0 || k[b] > v {
			return Selection{}, fmt.Errorf("selection: row %d capacity k = %d, want 0 <= k <= V_b = %d", b, k[b], v)
		}
		order := make([]int, v)
		for i := range order {
			order[i] = i
		}
		// Rank by r descending; equal r ranks the lower position first.
		sort.SliceStable(order, func(x, y int) bool { return row[order[x]] > row[order[y]] })
		chosen := append([]int(nil), order[:k[b]]...)
		sort.Ints(chosen)
		sel.Rows[b] = chosen
	}
	return sel, nil
}

// SelectCausal is docs/spec.md §9: token i of row b is routed iff
// score[b][i] > 0, where the score is the router weight r (Causal = router)
// or the predictor logit q (Causal = predictor). There is no capacity limit.
// Padded positions are never routed; a NaN score is an error.
func SelectCausal(score [][]float64, valid []int) (Selection, error) {
	if len(score) == 0 {
		return Selection{}, fmt.Errorf("causal selection: scores have 0 rows, want B >= 1")
	}
	s := len(score[0])
	if err := checkShape2("causal routing scores", score, len(score), s); err != nil {
		return Selection{}, err
	}
	if err := checkValid(valid, len(score), s); err != nil {
		return Selection{}, err
	}
	if err := checkNoNaN("causal routing score", score, valid); err != nil {
		return Selection{}, fmt.Errorf("causal selection: %w", err)
	}
	sel := Selection{S: s, Rows: make([][]int, len(score))}
	for b, row := range score {
		sel.Rows[b] = []int{}
		for i := 0; i < validLen(valid, b, s); i++ {
			if row[i] > 0 {
				sel.Rows[b] = append(sel.Rows[b], i)
			}
		}
	}
	return sel, nil
}

// checkShape2 checks that a per-token field is rows×cols.
func checkShape2(name string, a [][]float64, rows, cols int) error {
	if len(a) != rows {
		return fmt.Errorf("%s: %d rows, want B = %d", name, len(a), rows)
	}
	for b, row := range a {
		if len(row) != cols {
			return fmt.Errorf("%s: row %d has length %d, want S = %d", name, b, len(row), cols)
		}
	}
	return nil
}

// BoundaryGaps is the margin of docs/spec.md §4 for each row: the gap
// r_(k) - r_(k+1) between the k-th and the (k+1)-th largest valid router
// weight. A decision whose gap is below a float32 implementation's error can
// flip between two correct implementations. Rows with k = 0 or k = V_b have
// no boundary and get +Inf.
func BoundaryGaps(r [][]float64, k []int, valid []int) []float64 {
	gaps := make([]float64, len(r))
	for b, row := range r {
		v := validLen(valid, b, len(row))
		if k[b] == 0 || k[b] >= v {
			gaps[b] = math.Inf(1)
			continue
		}
		sorted := append([]float64(nil), row[:v]...)
		sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
		gaps[b] = sorted[k[b]-1] - sorted[k[b]]
	}
	return gaps
}
