package prod

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The paths of this machine, best first: generated AVX-512 or AVX2 code
// (asmgen) where the CPU has it, the Go kernel everywhere.
var paths = func() []*path {
	var ps []*path
	if cpu.X86.HasAVX512F {
		ps = append(ps, &path{name: "avx512", nr: 8, kernel: asmKernel(mul4x8AVX512)})
	}
	if cpu.X86.HasAVX2 {
		ps = append(ps, &path{name: "avx2", nr: 8, kernel: asmKernel(mul4x8AVX2)})
	}
	return append(ps, goPath)
}()

// asmKernel adapts a generated 4×8 kernel to the path's signature.
func asmKernel(f func(k int, a, b, c *float64, ldc int)) func(kb int, a, b, c []float64, ldc int) {
	return func(kb int, a, b, c []float64, ldc int) {
		// The kernel reads a[:4kb] and b[:8kb] and writes 8 values in
		// each of 4 rows of c: check that they exist.
		_, _, _ = a[4*kb-1], b[8*kb-1], c[3*ldc+7]
		f(kb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc)
	}
}
