package kernel

// The generated row kernels of the SIMD paths.
var (
	avx512Rows = &rowKernels{expShiftedAVX512, expShiftedSumAVX512, divToFloat32AVX512, maxFloat32AVX512, 8}
	avx2Rows   = &rowKernels{expShiftedAVX2, expShiftedSumAVX2, divToFloat32AVX2, maxFloat32AVX2, 4}
)

// rowAsm returns path pt's generated row kernels, nil on the Go path.
func rowAsm(pt *path) *rowKernels {
	switch pt {
	case avx512:
		return avx512Rows
	case avx2:
		return avx2Rows
	}
	return nil
}
