package kernel

import (
	"math"

	"golang.org/x/sys/cpu"
)

// Reading a in place saves packing it, and is the faster layout wherever
// its rows (MatMulNN, MatMulNT) or steps (MatMulTN) lie close enough
// together. Measured per core on AMD Zen 4 (docs/performance.md), in place
// against packed:
//   - rows at most 768 floats (3 KiB) apart: 0-5 % faster at 256³ to 768³
//     on both paths (11 % at 1536×512×512 NN on AVX2). At 1024 floats (4 KiB) all rows of a register block
//     fall in one set of the 8-way L1: the 12 rows of the AVX-512 kernel
//     then ran 27 % slower than packing, AVX2's 6 rows level with it; at
//     1000 floats both paths were up to 4 % slower. So rowsMaxLd = 768 on both.
//   - steps of TN on the AVX-512 path: faster at every m tried, 256 to 3000
//     (by 5-36 %; 1024³ by 5 %), so no limit. On the AVX2 path, with half
//     the multiply-adds per step to hide a new page behind, 23-28 % slower
//     than packing at m = 1024 and 2048 (a page or more per step), faster
//     at m <= 768: colsMaxLd = 768.

// avx512 is the AVX-512 path: register blocks of up to 12 rows × 32
// columns (two 16-lane vectors; 16 for a narrow last panel).
var avx512 = &path{
	name:       "avx512",
	mr:         12,
	widths:     []int{16, 32},
	colsMaxLd:  math.MaxInt,
	rowsMaxLd:  768,
	transpose4: transpose4AVX,
	transpose8: transpose8AVX,
	asm: [][]asmKernel{
		{gemmAVX512_1x16, gemmAVX512_1x32},
		{gemmAVX512_2x16, gemmAVX512_2x32},
		{gemmAVX512_3x16, gemmAVX512_3x32},
		{gemmAVX512_4x16, gemmAVX512_4x32},
		{gemmAVX512_5x16, gemmAVX512_5x32},
		{gemmAVX512_6x16, gemmAVX512_6x32},
		{gemmAVX512_7x16, gemmAVX512_7x32},
		{gemmAVX512_8x16, gemmAVX512_8x32},
		{gemmAVX512_9x16, gemmAVX512_9x32},
		{gemmAVX512_10x16, gemmAVX512_10x32},
		{gemmAVX512_11x16, gemmAVX512_11x32},
		{gemmAVX512_12x16, gemmAVX512_12x32},
	},
	cols: [][]asmKernelA{
		{gemmAVX512Cols_1x16, gemmAVX512Cols_1x32},
		{gemmAVX512Cols_2x16, gemmAVX512Cols_2x32},
		{gemmAVX512Cols_3x16, gemmAVX512Cols_3x32},
		{gemmAVX512Cols_4x16, gemmAVX512Cols_4x32},
		{gemmAVX512Cols_5x16, gemmAVX512Cols_5x32},
		{gemmAVX512Cols_6x16, gemmAVX512Cols_6x32},
		{gemmAVX512Cols_7x16, gemmAVX512Cols_7x32},
		{gemmAVX512Cols_8x16, gemmAVX512Cols_8x32},
		{gemmAVX512Cols_9x16, gemmAVX512Cols_9x32},
		{gemmAVX512Cols_10x16, gemmAVX512Cols_10x32},
		{gemmAVX512Cols_11x16, gemmAVX512Cols_11x32},
		{gemmAVX512Cols_12x16, gemmAVX512Cols_12x32},
	},
	rows: [][]asmKernelA{
		{gemmAVX512Rows_1x16, gemmAVX512Rows_1x32},
		{gemmAVX512Rows_2x16, gemmAVX512Rows_2x32},
		{gemmAVX512Rows_3x16, gemmAVX512Rows_3x32},
		{gemmAVX512Rows_4x16, gemmAVX512Rows_4x32},
		{gemmAVX512Rows_5x16, gemmAVX512Rows_5x32},
		{gemmAVX512Rows_6x16, gemmAVX512Rows_6x32},
		{gemmAVX512Rows_7x16, gemmAVX512Rows_7x32},
		{gemmAVX512Rows_8x16, gemmAVX512Rows_8x32},
		{gemmAVX512Rows_9x16, gemmAVX512Rows_9x32},
		{gemmAVX512Rows_10x16, gemmAVX512Rows_10x32},
		{gemmAVX512Rows_11x16, gemmAVX512Rows_11x32},
		{gemmAVX512Rows_12x16, gemmAVX512Rows_12x32},
	},
}

// avx2 is the AVX2+FMA path: register blocks of up to 6 rows × 16 columns
// (two 8-lane vectors; 8 for a narrow last panel).
var avx2 = &path{
	name:       "avx2",
	mr:         6,
	widths:     []int{8, 16},
	colsMaxLd:  768,
	rowsMaxLd:  768,
	transpose4: transpose4AVX,
	transpose8: transpose8AVX,
	asm: [][]asmKernel{
		{gemmAVX2_1x8, gemmAVX2_1x16},
		{gemmAVX2_2x8, gemmAVX2_2x16},
		{gemmAVX2_3x8, gemmAVX2_3x16},
		{gemmAVX2_4x8, gemmAVX2_4x16},
		{gemmAVX2_5x8, gemmAVX2_5x16},
		{gemmAVX2_6x8, gemmAVX2_6x16},
	},
	cols: [][]asmKernelA{
		{gemmAVX2Cols_1x8, gemmAVX2Cols_1x16},
		{gemmAVX2Cols_2x8, gemmAVX2Cols_2x16},
		{gemmAVX2Cols_3x8, gemmAVX2Cols_3x16},
		{gemmAVX2Cols_4x8, gemmAVX2Cols_4x16},
		{gemmAVX2Cols_5x8, gemmAVX2Cols_5x16},
		{gemmAVX2Cols_6x8, gemmAVX2Cols_6x16},
	},
	rows: [][]asmKernelA{
		{gemmAVX2Rows_1x8, gemmAVX2Rows_1x16},
		{gemmAVX2Rows_2x8, gemmAVX2Rows_2x16},
		{gemmAVX2Rows_3x8, gemmAVX2Rows_3x16},
		{gemmAVX2Rows_4x8, gemmAVX2Rows_4x16},
		{gemmAVX2Rows_5x8, gemmAVX2Rows_5x16},
		{gemmAVX2Rows_6x8, gemmAVX2Rows_6x16},
	},
}

// avx512MulAdd is the AVX-512 path with the Go loops' bits (Path
// Portable): the blocks of avx512, each step a multiply and then an add,
// each rounded (gemmAVX512MulAdd_*), and a always packed.
var avx512MulAdd = &path{
	name:       "avx512muladd",
	mr:         12,
	widths:     []int{16, 32},
	transpose4: transpose4AVX,
	transpose8: transpose8AVX,
	asm: [][]asmKernel{
		{gemmAVX512MulAdd_1x16, gemmAVX512MulAdd_1x32},
		{gemmAVX512MulAdd_2x16, gemmAVX512MulAdd_2x32},
		{gemmAVX512MulAdd_3x16, gemmAVX512MulAdd_3x32},
		{gemmAVX512MulAdd_4x16, gemmAVX512MulAdd_4x32},
		{gemmAVX512MulAdd_5x16, gemmAVX512MulAdd_5x32},
		{gemmAVX512MulAdd_6x16, gemmAVX512MulAdd_6x32},
		{gemmAVX512MulAdd_7x16, gemmAVX512MulAdd_7x32},
		{gemmAVX512MulAdd_8x16, gemmAVX512MulAdd_8x32},
		{gemmAVX512MulAdd_9x16, gemmAVX512MulAdd_9x32},
		{gemmAVX512MulAdd_10x16, gemmAVX512MulAdd_10x32},
		{gemmAVX512MulAdd_11x16, gemmAVX512MulAdd_11x32},
		{gemmAVX512MulAdd_12x16, gemmAVX512MulAdd_12x32},
	},
}

// avx2MulAdd is the AVX2 path with the Go loops' bits (Path Portable):
// the blocks of avx2, each step a multiply and then an add, each rounded
// (gemmAVX2MulAdd_*), and a always packed. It needs AVX2 only, not FMA.
var avx2MulAdd = &path{
	name:       "avx2muladd",
	mr:         6,
	widths:     []int{8, 16},
	transpose4: transpose4AVX,
	transpose8: transpose8AVX,
	asm: [][]asmKernel{
		{gemmAVX2MulAdd_1x8, gemmAVX2MulAdd_1x16},
		{gemmAVX2MulAdd_2x8, gemmAVX2MulAdd_2x16},
		{gemmAVX2MulAdd_3x8, gemmAVX2MulAdd_3x16},
		{gemmAVX2MulAdd_4x8, gemmAVX2MulAdd_4x16},
		{gemmAVX2MulAdd_5x8, gemmAVX2MulAdd_5x16},
		{gemmAVX2MulAdd_6x8, gemmAVX2MulAdd_6x16},
	},
}

// available lists the paths this CPU can run, fastest first: AVX-512 (the
// F subset) when the CPU and OS support it, AVX2 with FMA, and the Go loops.
func available() []*path {
	var ps []*path
	if cpu.X86.HasAVX512F {
		ps = append(ps, avx512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ps = append(ps, avx2)
	}
	return append(ps, goPath)
}

// availablePortable lists the paths with the Go loops' bits this CPU can
// run, fastest first: AVX-512's and AVX2's multiply-and-add kernels where
// the CPU has them, and the Go loops.
func availablePortable() []*path {
	var ps []*path
	if cpu.X86.HasAVX512F {
		ps = append(ps, avx512MulAdd)
	}
	if cpu.X86.HasAVX2 {
		ps = append(ps, avx2MulAdd)
	}
	return append(ps, goPath)
}
