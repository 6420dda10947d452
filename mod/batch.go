package mod

import (
	"fmt"

	"github.com/modref/modref/autograd"
)

// batch is the shape of a batch: Rows sequences of S positions, sequence b
// valid for its first valid[b] positions (all of them when valid is nil).
type batch struct {
	rows, s int
	valid   []int
}

// newBatch checks the shape and the valid lengths.
func newBatch(rows, s int, valid []int) (batch, error) {
	if rows < 1 || s < 1 {
		return batch{}, fmt.Errorf("batch of %d sequences of %d tokens: want at least one of each", rows, s)
	}
	if valid != nil {
		if len(valid) != rows {
			return batch{}, fmt.Errorf("Valid has %d lengths, want one per sequence (B = %d)", len(valid), rows)
		}
		for b, v := range valid {
			if v < 0 || v > s {
				return batch{}, fmt.Errorf("Valid[%d] = %d, want 0 <= V_b <= S = %d", b, v, s)
			}
		}
	}
	return batch{rows: rows, s: s, valid: valid}, nil
}

// validLen returns V_b.
func (bt batch) validLen(b int) int {
	if bt.valid == nil {
		return bt.s
	}
	return bt.valid[b]
}

// padded reports whether some position is padding.
func (bt batch) padded() bool {
	for b := 0; b < bt.rows; b++ {
		if bt.validLen(b) < bt.s {
			return true
		}
	}
	return false
}

// isValid reports whether flat row k (sequence k/S, position k%S) is valid.
func (bt batch) isValid(k int) bool { return k%bt.s < bt.validLen(k/bt.s) }

// count returns the number of valid tokens.
func (bt batch) count() int {
	n := 0
	for b := 0; b < bt.rows; b++ {
		n += bt.validLen(b)
	}
	return n
}

// lengths returns V_b for every sequence, on the tape.
func (bt batch) lengths(tp *autograd.Tape) []int {
	l := autograd.Make[int](tp, bt.rows)
	for b := range l {
		l[b] = bt.validLen(b)
	}
	return l
}

// rowsOf lists, for per-sequence position lists pos, the flat rows b·S+p of
// every position, sequence after sequence, on the tape.
func (bt batch) rowsOf(tp *autograd.Tape, pos [][]int) []int {
	n := 0
	for _, p := range pos {
		n += len(p)
	}
	dst := autograd.Make[int](tp, n)[:0]
	for b, p := range pos {
		for _, i := range p {
			dst = append(dst, b*bt.s+i)
		}
	}
	return dst
}

// validPositions returns, per sequence, its valid positions 0..V_b−1, on
// the tape (the sequences share one list 0..S−1).
func (bt batch) validPositions(tp *autograd.Tape) [][]int {
	all := autograd.Make[int](tp, bt.s)
	for i := range all {
		all[i] = i
	}
	pos := autograd.Make[[]int](tp, bt.rows)
	for b := range pos {
		v := bt.validLen(b)
		pos[b] = all[:v:v]
	}
	return pos
}
