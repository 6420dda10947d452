// Package kernel holds the dense float32 kernels the autograd engine spends
// its time in: the three matrix products a layer and its backward pass need,
// GELU's forward and backward over slices (gelu.go: GELUForward,
// GELUBackward, whose AVX-512 and AVX2 assembly gives the bits of the scalar
// GELUEval on every path), and the row kernels of softmax, attention and
// cross-entropy (exp.go: the float64 exponential Exp, a row of them by
// ExpShifted and ExpShiftedSum, a row's maximum by Max and its quotients by
// DivToFloat32; scoregrad.go: a row of softmax's gradient by ScaleShifted;
// absmax.go: the largest bits of |x| by MaxAbsBits, for attention's
// exactness checks), whose SIMD paths give exactly the bits of the Go loops
// they replace.
//
// Every matrix is row-major. Each kernel overwrites its destination; callers
// that accumulate (gradients) add the result themselves. A product with k = 0
// is an empty sum: the destination is set to zero.
//
// # Speed
//
// The three products share one GotoBLAS/BLIS-style implementation
// (gemm.go): for each run of kc steps of k, the participant packs a block of
// b into panels nr columns wide and a block of a into panels mr rows tall,
// and a micro-kernel holds an mr×nr block of c in vector registers while it
// runs through the two panels, using every vector of b it loads for mr
// rows. Packing absorbs the transposes: MatMulNT packs rows of b as columns,
// MatMulTN columns of a as rows, and from there the three are the same
// code. Where a's rows (NN, NT) or its steps of k (TN) lie close enough
// together in memory (a path's rowsMaxLd, colsMaxLd), the SIMD
// micro-kernels read a in place instead of from a packed panel, which saves
// the packing; each kernel also prefetches the block of c that comes after
// its own. The micro-kernels are
// chosen at run time by CPU feature (golang.org/x/sys/cpu):
//   - avx512: 12×32 blocks (24 ZMM accumulators, b in 2 more, a broadcast
//     by the FMA from memory), on CPUs with AVX-512F;
//   - avx2: 6×16 blocks (12 YMM accumulators), on CPUs with AVX2 and FMA;
//   - go: 4×4 blocks in plain Go, on every other machine (arm64 included).
//
// The assembly is generated from Go with avo by the asmgen command (a module
// of its own, so that modref does not depend on avo); .ci/run checks that
// regenerating it changes nothing. Products of at least parallelMinFlops =
// 2¹⁸ multiply-adds are cut into blocks of c that the caller and a fixed pool
// of NumCPU-1 worker goroutines share; smaller ones run on the caller alone.
// No call allocates once the pool and its scratch space are warm, and any
// number of goroutines may call the kernels at once.
//
// # What is bit-reproducible
//
// Every element of a result is one chain of float32 operations in order of
// p, from 0:
//
//	avx512, avx2: c = fma(A[i,p], B[p,j], c)       (one rounding per step)
//	go:           c = float32(A[i,p]·B[p,j]) + c  (two roundings per step)
//	avx512muladd, avx2muladd: as go, a multiply and then an add
//
// for p = 0, 1, …, k-1. The micro-kernels carry the chain across runs of k
// (they load c back rather than add partial sums), and no block size, split
// between threads, edge of a register block or reading a in place rather
// than packed changes it (TestChains and TestLayoutChains check the chains
// bit for bit, TestSplits and TestGOMAXPROCS the splits, TestLayoutsAgree
// the layouts of a). So:
//   - results are bit-identical across runs, GOMAXPROCS and splits;
//   - the avx512 and avx2 paths give the same bits (an FMA is correctly
//     rounded whatever the vector width); the go path does not (it rounds
//     every product, as the FMA rule of docs/design.md requires of Go code,
//     which no compiler may fuse), and agrees with them only within the
//     tolerance the tests measure (8 units of float32 roundoff relative to
//     Σ|a·b|, docs/tolerances.md); Path Portable runs a product with the go
//     path's bits on every machine, for results that must be the same bits
//     everywhere: on the multiply-and-add micro-kernels avx512muladd or
//     avx2muladd (gemmAVX512MulAdd_*, gemmAVX2MulAdd_*: the blocks of
//     avx512 and avx2, each step a VMULPS and then a VADDPS, a always
//     packed) where the CPU has AVX-512F or AVX2 (measured as fast as
//     the FMA kernels on AMD Zen 5, whose multiplies and adds issue on
//     separate pipes; docs/performance.md), and on the Go loops elsewhere
//     (TestPortableIsGoLoops and TestPortableChains check the bits);
//   - row i of MatMulNN and MatMulNT depends only on row i of a and on b, so
//     a token's result does not depend on the other tokens in the batch;
//   - row i of MatMulTN depends only on column i of a and on b; its
//     reduction runs over k in order, so it does depend on k and on the
//     order of the rows of a and b (when k counts tokens, as in a weight
//     gradient, adding or reordering tokens changes the bits, as any float
//     sum would);
//   - products whose terms past some p are all zero (a softmax row's masked
//     keys, with finite values) equal the shorter product: a zero term
//     leaves a nonzero chain unchanged;
//   - MatMulTN(a, b) and MatMulNT(a, b) have the bits of MatMulNN with the
//     transposed operand.
package kernel

import "fmt"

//go:generate sh -c "cd asmgen && go run . -out ../kernel_amd64.s -stubs ../stubs_amd64.go -pkg kernel"

// Path says which kernels compute a product: the fastest this machine has
// (Fastest, the zero Path), or kernels with the Go loops' bits whatever the
// CPU (Portable), which are the same on every machine and architecture (two
// roundings per step, no fused multiply-add): for results that must not
// depend on the machine that computes them. On amd64 with AVX-512F or AVX2
// Portable runs generated SIMD kernels that give those bits; elsewhere, the
// Go loops, at a twenty-fifth of the speed.
type Path uint8

const (
	// Fastest runs a product on the fastest path this CPU has.
	Fastest Path = iota
	// Portable runs a product with the Go loops' bits: on SIMD kernels
	// that multiply and then add where the CPU has them, else on the Go
	// loops.
	Portable
)

// MatMulNN sets c (m×n) to a (m×k) · b (k×n).
func MatMulNN(c, a, b []float32, m, k, n int) { Fastest.MatMulNN(c, a, b, m, k, n) }

// MatMulNT sets c (m×n) to a (m×k) · bᵀ, where b is n×k.
func MatMulNT(c, a, b []float32, m, k, n int) { Fastest.MatMulNT(c, a, b, m, k, n) }

// MatMulTN sets c (m×n) to aᵀ · b, where a is k×m and b is k×n.
func MatMulTN(c, a, b []float32, m, k, n int) { Fastest.MatMulTN(c, a, b, m, k, n) }

// MatMulNN sets c (m×n) to a (m×k) · b (k×n) on path p.
func (p Path) MatMulNN(c, a, b []float32, m, k, n int) {
	check("MatMulNN", c, a, b, m, k, n)
	run(opNN, p.path(), c, a, b, m, k, n)
}

// MatMulNT sets c (m×n) to a (m×k) · bᵀ, where b is n×k, on path p.
func (p Path) MatMulNT(c, a, b []float32, m, k, n int) {
	check("MatMulNT", c, a, b, m, k, n)
	run(opNT, p.path(), c, a, b, m, k, n)
}

// MatMulTN sets c (m×n) to aᵀ · b, where a is k×m and b is k×n, on path p.
func (p Path) MatMulTN(c, a, b []float32, m, k, n int) {
	check("MatMulTN", c, a, b, m, k, n)
	run(opTN, p.path(), c, a, b, m, k, n)
}

// path returns the kernels p runs on.
func (p Path) path() *path {
	if p == Portable {
		return portable
	}
	return active
}

func check(op string, c, a, b []float32, m, k, n int) {
	if m < 0 || k < 0 || n < 0 || len(a) != m*k || len(b) != k*n || len(c) != m*n {
		panic(fmt.Sprintf("kernel.%s: m=%d k=%d n=%d needs len(a)=%d len(b)=%d len(c)=%d, have %d %d %d",
			op, m, k, n, m*k, k*n, m*n, len(a), len(b), len(c)))
	}
}
