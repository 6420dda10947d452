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
