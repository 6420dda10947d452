package autograd

import (
	"testing"
	"unsafe"
)

// TestMakeHandsOutZeroedDisjointSlices checks that Make's slices are zeroed
// even when their memory held values before the Reset, have capacity n, and
// do not overlap, within a pass and across a buffer that is outgrown.
func TestMakeHandsOutZeroedDisjointSlices(t *testing.T) {
	var tp Tape
	for pass := range 3 {
		tp.Reset()
		var got [][]int
		for i, n := range []int{3, 0, 50, 7, 100, 1} { // 161 > 64: outgrows the first buffer
			s := Make[int](&tp, n)
			if len(s) != n || cap(s) != n {
				t.Fatalf("pass %d: Make(%d) has len %d, cap %d", pass, n, len(s), cap(s))
			}
			for j, v := range s {
				if v != 0 {
					t.Fatalf("pass %d: slice %d holds %d at %d, want zeroed", pass, i, v, j)
				}
				s[j] = 1000*i + j + 1
			}
			got = append(got, s)
		}
		for i, s := range got {
			for j, v := range s {
				if v != 1000*i+j+1 {
					t.Fatalf("pass %d: slice %d was overwritten at %d: %d", pass, i, j, v)
				}
			}
		}
	}
}

// TestMakeKeepsTypesApart checks that slices of different element types
// come from different buffers.
func TestMakeKeepsTypesApart(t *testing.T) {
	var tp Tape
	a := Make[int32](&tp, 4)
	b := Make[float32](&tp, 4)
	if unsafe.Pointer(&a[0]) == unsafe.Pointer(&b[0]) {
		t.Fatal("int32 and float32 slices share memory")
	}
	for i := range a {
		a[i] = -1
	}
	for i, v := range b {
		if v != 0 {
			t.Fatalf("float32 slice changed at %d to %v by a write to the int32 slice", i, v)
		}
	}
}

// TestMakeAllocatesNothingAfterAPass checks that a pass asking for the same
// slices after Reset, or for smaller ones, allocates nothing once the tape
// has seen one such pass, though the pass outgrew the arenas' first buffers.
func TestMakeAllocatesNothingAfterAPass(t *testing.T) {
	var tp Tape
	pass := func(scale int) func() {
		return func() {
			tp.Reset()
			for n := range 40 {
				Make[int](&tp, n/scale)
				Make[[]int](&tp, 2)
				Make[bool](&tp, n/scale)
			}
		}
	}
	pass(1)()
	for _, scale := range []int{1, 2} {
		if n := testing.AllocsPerRun(10, pass(scale)); n != 0 {
			t.Fatalf("a repeated pass (lengths divided by %d) allocates %v times, want 0", scale, n)
		}
	}
}
