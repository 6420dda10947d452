package kernel

// expAsm returns path pt's generated exponential and the count of values it
// takes at a time: 8 on the AVX-512 path, 4 on AVX2, none on the Go path.
func expAsm(pt *path) (expFunc, int) {
	switch pt {
	case avx512:
		return expShiftedAVX512, 8
	case avx2:
		return expShiftedAVX2, 4
	}
	return nil, 0
}
