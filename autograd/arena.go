package autograd

// Make returns a tape-owned slice of n zero values of T, for the per-step
// index lists, constants and results of code that records on tp: like the
// tensors the tape hands out, it is valid until the tape's next Reset, after
// which its memory is handed out again. Its capacity is n, so appending to
// it never writes into another slice.
//
// A forward pass that asks for the same slices after every Reset allocates
// nothing once the tape has seen one pass: the arena of each element type
// keeps the buffers it took and hands them out again in the same order.
func Make[T any](tp *Tape, n int) []T {
	if n < 0 {
		panic("autograd.Make: negative length")
	}
	var a *arena[T]
	for _, r := range tp.arenas {
		if a0, ok := r.(*arena[T]); ok {
			a = a0
			break
		}
	}
	if a == nil {
		a = new(arena[T])
		tp.arenas = append(tp.arenas, a)
	}
	return a.take(n)
}

// arena is a bump allocator of one element type over a list of buffers,
// each at least twice the size of the one before, reset with its tape.
type arena[T any] struct {
	bufs [][]T
	cur  int // the buffer being handed out
	used int // elements of bufs[cur] handed out since the last reset
}

// resetter is an arena of any element type.
type resetter interface{ reset() }

// take hands out the next n zeroed elements: from the current buffer if
// they fit, else from the next buffer large enough, which is added if
// there is none.
func (a *arena[T]) take(n int) []T {
	for a.cur < len(a.bufs) && a.used+n > len(a.bufs[a.cur]) {
		a.cur++
		a.used = 0
	}
	if a.cur == len(a.bufs) {
		last := 0
		if a.cur > 0 {
			last = len(a.bufs[a.cur-1])
		}
		a.bufs = append(a.bufs, make([]T, max(2*last, n, 64)))
	}
	s := a.bufs[a.cur][a.used : a.used+n : a.used+n]
	clear(s)
	a.used += n
	return s
}

// reset takes back everything handed out.
func (a *arena[T]) reset() { a.cur, a.used = 0, 0 }
