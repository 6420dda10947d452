package kernel

// rowAsm returns path pt's generated exponential and division and the
// count of values they take at a time: 8 on the AVX-512 path, 4 on AVX2,
// none on the Go path.
func rowAsm(pt *path) (expFunc, divFunc, int) {
	switch pt {
	case avx512:
		return expShiftedAVX512, divToFloat32AVX512, 8
	case avx2:
		return expShiftedAVX2, divToFloat32AVX2, 4
	}
	return nil, nil, 0
}
