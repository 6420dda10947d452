package kernel

// geluForwardAsm runs GELUForward's assembly kernel for path pt over the
// longest prefix of x whose length is a multiple of the kernel's lanes, and
// returns that length: 0 on the Go path.
func geluForwardAsm(pt *path, y, x []float32) int {
	switch pt {
	case avx512:
		if n := len(x) &^ 15; n > 0 {
			geluForwardAVX512(&y[0], &x[0], n, &geluTab.centre[0])
			return n
		}
	case avx2:
		if n := len(x) &^ 7; n > 0 {
			geluForwardAVX2(&y[0], &x[0], n, &geluTab.centre[0])
			return n
		}
	}
	return 0
}

// geluBackwardAsm runs GELUBackward's assembly kernel for path pt, as
// geluForwardAsm does GELUForward's.
func geluBackwardAsm(pt *path, dx, g, x []float32) int {
	switch pt {
	case avx512:
		if n := len(x) &^ 15; n > 0 {
			geluBackwardAVX512(&dx[0], &g[0], &x[0], n, &geluTab.centre[0])
			return n
		}
	case avx2:
		if n := len(x) &^ 7; n > 0 {
			geluBackwardAVX2(&dx[0], &g[0], &x[0], n, &geluTab.centre[0])
			return n
		}
	}
	return 0
}
