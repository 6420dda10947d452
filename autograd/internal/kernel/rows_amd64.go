// This file holds the assembly calls of MaxAbsBits and ScaleShifted.

package kernel

// maxAbsAsm runs MaxAbsBits's assembly kernel for path pt over the longest
// prefix of x whose length is a multiple of the kernel's lanes, and returns
// its result and that length: 0, 0 on the Go path or for a shorter x.
func maxAbsAsm(pt *path, x []float32) (uint32, int) {
	switch pt {
	case avx512:
		if n := len(x) &^ 15; n > 0 {
			return maxAbsBitsAVX512(&x[0], n), n
		}
	case avx2:
		if n := len(x) &^ 7; n > 0 {
			return maxAbsBitsAVX2(&x[0], n), n
		}
	}
	return 0, 0
}

// scaleShiftedAsm runs ScaleShifted's assembly kernel for path pt over the
// longest prefix of g whose length is a multiple of the kernel's lanes, and
// returns that length: 0 on the Go path.
func scaleShiftedAsm(pt *path, g, y []float32, s float64) int {
	switch pt {
	case avx512:
		if n := len(g) &^ 7; n > 0 {
			scaleShiftedAVX512(&g[0], &y[0], n, s)
			return n
		}
	case avx2:
		if n := len(g) &^ 3; n > 0 {
			scaleShiftedAVX2(&g[0], &y[0], n, s)
			return n
		}
	}
	return 0
}
