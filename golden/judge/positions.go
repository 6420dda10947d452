package judge

import (
	"fmt"
	"slices"
	"strings"
)

// positions lists token positions, says "every position" when they are
// all n of a row, and names a run from some position to the row's end (a
// stage right up to a position and wrong from it on, as a cache or mask
// that goes wrong at one token makes it).
func positions(pos []int, n int) string {
	switch {
	case len(pos) == n:
		return "every position"
	case len(pos) > 1 && pos[len(pos)-1] == n-1 && pos[len(pos)-1]-pos[0] == len(pos)-1:
		return fmt.Sprintf("every position from %d on (right before it)", pos[0])
	}
	return PositionList(pos)
}

// listedPositions is the most positions PositionList writes out one by
// one, and shownRuns how many runs of a longer list it writes.
const (
	listedPositions = 16
	shownRuns       = 8
)

// PositionList writes token positions for a person to read: up to
// listedPositions of them as they are, "[3 7 9]"; a longer list (a row of
// S = 2048 selects hundreds) as its runs of consecutive positions, the
// first shownRuns of them, its count and its range: "[0-3 7 9-12 ...]
// (512 positions in 301 runs, 0 to 2045)".
func PositionList(pos []int) string {
	if len(pos) <= listedPositions {
		return fmt.Sprint(pos)
	}
	var runs []string
	lo, hi := slices.Min(pos), slices.Max(pos)
	n := 0
	for i := 0; i < len(pos); {
		j := i
		for j+1 < len(pos) && pos[j+1] == pos[j]+1 {
			j++
		}
		if n++; len(runs) < shownRuns {
			if j == i {
				runs = append(runs, fmt.Sprint(pos[i]))
			} else {
				runs = append(runs, fmt.Sprintf("%d-%d", pos[i], pos[j]))
			}
		}
		i = j + 1
	}
	more, plural := "", "s"
	if n > shownRuns {
		more = " ..."
	}
	if n == 1 {
		plural = ""
	}
	return fmt.Sprintf("[%s%s] (%d positions in %d run%s, %d to %d)", strings.Join(runs, " "), more, len(pos), n, plural, lo, hi)
}
