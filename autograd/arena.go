package autograd

// Make returns a tape-owned slice of n zero values of T, for the per-step
// index lists, constants and results of code that records on tp: like the
// tensors the tape hands out, it is valid until the tape's next Reset, after
// which its memory is handed out again. Its capacity is n, so appending to
// it never writes into another slice.
//
// A forward pass that asks for the same slices after every Reset allocates
// nothing once the tape has seen one pass: a pass that outgrows a type's
// buffer takes a new one, and the next Reset replaces both by one buffer
// large enough for the whole pass.
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

// arena is a bump allocator of one element type, reset with its tape.
type arena[T any] struct {
	buf  []T
	used int // elements of buf handed out since the last reset
	need int // elements handed out since the last reset, over all buffers
}

// resetter is an arena of any element type.
type resetter interface{ reset() }

// take hands out the next n zeroed elements.
func (a *arena[T]) take(n int) []T {
	if a.used+n > len(a.buf) || a.buf == nil { // never a nil slice, even of length 0
		a.buf = make([]T, max(2*len(a.buf), n, 64))
		a.used = 0
	}
	s := a.buf[a.used : a.used+n : a.used+n]
	clear(s)
	a.used += n
	a.need += n
	return s
}

// reset takes back everything handed out; a buffer outgrown since the last
// reset is replaced by one that holds the whole pass.
func (a *arena[T]) reset() {
	if a.need > len(a.buf) {
		a.buf = make([]T, a.need)
	}
	a.used, a.need = 0, 0
}
