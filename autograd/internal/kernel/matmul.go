// Package kernel holds the dense float32 kernels the autograd engine spends
// its time in: the three matrix products a layer and its backward pass need.
//
// Every matrix is row-major. Each kernel overwrites its destination; callers
// that accumulate (gradients) add the result themselves. A product with k = 0
// is an empty sum: the destination is set to zero.
//
// # Speed
//
// On amd64 machines with AVX2 and FMA the kernels run on the AVX2 matrix
// kernel of github.com/viterin/vek (vek32.MatMul_Into, called on at most
// three rows at a time so that it never starts goroutines of its own);
// elsewhere they run on plain Go loops. vek's kernel streams the right
// operand once per row, so the vek path sums k in runs of kBlock = 256 and
// reuses each kBlock×n block of b for groupRows = 48 rows while it is in
// cache.
// MatMulTN first gathers the block's columns of a into the rows of a small
// panel, and MatMulNT transposes ntCols = 256 rows of b at a time into a
// k×256 panel; neither copies a whole operand. Products of at least
// parallelMinFlops = 2¹⁸ multiply-adds are cut into blocks of c that the caller
// and a fixed pool of NumCPU-1 worker goroutines share; smaller ones run on
// the caller alone. No call allocates once the pool and its scratch space
// are warm, and any number of goroutines may call the kernels at once.
//
// # What is bit-reproducible
//
// Every element of a result is computed by one sequence of float32
// operations that depends only on the operands' values, on k and on the
// path, never on m, on GOMAXPROCS, or on how the work was shared out. (The
// one exception to "only on k" is n = 1, which vek multiplies with its
// matrix-vector kernel.) On the vek path, element (i, j) of a·b is the sum,
// in order of p, of the runs of kBlock FMAs c += a[i,p]·b[p,j]; the Go path
// rounds each product and adds them in order of p. So, for the same path:
//   - results are bit-identical across runs and across any GOMAXPROCS;
//   - row i of MatMulNN and MatMulNT depends only on row i of a and on b, so
//     a token's result does not depend on the other tokens in the batch;
//   - row i of MatMulTN depends only on column i of a and on b, so it does
//     not depend on the other columns of a; its reduction runs over k in
//     order p = 0, 1, …, k-1, so it does depend on k and on the order of the
//     rows of a and b (when k counts tokens, as in a weight gradient, adding
//     or reordering tokens changes the bits, as any float sum would);
//   - MatMulTN(a, b) and MatMulNT(a, b) have the bits of MatMulNN with the
//     transposed operand.
//
// The two paths differ in rounding: vek's AVX2 kernel fuses each
// multiply-add (FMA, one rounding), while the Go loops round every product
// (written float32(x*y), which the Go specification forbids the compiler to
// fuse, on arm64, ppc64 and s390x too) and every sum. The AVX2 path and the
// Go path therefore agree only within the tolerance the tests measure (8
// units of float32 roundoff relative to Σ|a·b|), not bit for bit.
package kernel

import (
	"fmt"

	"github.com/viterin/vek"
	"github.com/viterin/vek/vek32"
)

// useVek selects vek's AVX2+FMA kernels; when false the pure-Go loops run.
// It is vek's own test for AVX2 and FMA, and the tests flip it to compare
// the two paths.
var useVek = vek.Info().Acceleration

// MatMulNN sets c (m×n) to a (m×k) · b (k×n).
func MatMulNN(c, a, b []float32, m, k, n int) {
	check("MatMulNN", c, a, b, m, k, n)
	run(opNN, c, a, b, m, k, n)
}

// MatMulNT sets c (m×n) to a (m×k) · bᵀ, where b is n×k.
func MatMulNT(c, a, b []float32, m, k, n int) {
	check("MatMulNT", c, a, b, m, k, n)
	run(opNT, c, a, b, m, k, n)
}

// MatMulTN sets c (m×n) to aᵀ · b, where a is k×m and b is k×n.
func MatMulTN(c, a, b []float32, m, k, n int) {
	check("MatMulTN", c, a, b, m, k, n)
	run(opTN, c, a, b, m, k, n)
}

func check(op string, c, a, b []float32, m, k, n int) {
	if m < 0 || k < 0 || n < 0 || len(a) != m*k || len(b) != k*n || len(c) != m*n {
		panic(fmt.Sprintf("kernel.%s: m=%d k=%d n=%d needs len(a)=%d len(b)=%d len(c)=%d, have %d %d %d",
			op, m, k, n, m*k, k*n, m*n, len(a), len(b), len(c)))
	}
}

// Blocking of the vek path. vek's kernel computes a row of c as a sequence
// of FMAs c[j] += a[p]·b[p,j] over p, streaming b once for each row; these
// constants make a block of b stay in cache while it serves many rows.
const (
	// kBlock is the length of the runs of k handed to vek's kernel. The
	// partial products of the runs are added in order of p.
	kBlock = 256
	// groupRows is how many rows of c share each kBlock×n block of b.
	groupRows = 48
	// vekRows is the most rows handed to one vek32.MatMul_Into call: with
	// fewer than 4 rows vek runs on the caller instead of spawning
	// goroutines of its own.
	vekRows = 3
	// ntCols is how many rows of b MatMulNT transposes into the columns of a
	// k×ntCols panel; the last panel takes one more rather than leave a
	// panel of width 1, which vek would hand to its matrix-vector kernel.
	ntCols = 256
)

// gemmVek sets, for r in [0, rows), c[r·ldc : r·ldc+n] to the product of
// a[r·lda : r·lda+k] and the k×n matrix b, on vek's kernel. scratch must
// hold at least n values.
func gemmVek(c []float32, ldc int, a []float32, lda int, b, scratch []float32, rows, k, n int) {
	scratch = scratch[:n]
	if k <= kBlock && ldc == n && lda == k { // one run, rows contiguous
		for r := 0; r < rows; r += vekRows {
			q := min(vekRows, rows-r)
			vek32.MatMul_Into(c[r*n:(r+q)*n], a[r*k:(r+q)*k], b, k)
		}
		return
	}
	for g0 := 0; g0 < rows; g0 += groupRows {
		g1 := min(g0+groupRows, rows)
		for p0 := 0; p0 < k; p0 += kBlock {
			p1 := min(p0+kBlock, k)
			bp := b[p0*n : p1*n]
			for r := g0; r < g1; r++ {
				cr := c[r*ldc : r*ldc+n]
				if p0 == 0 {
					vek32.MatMul_Into(cr, a[r*lda:r*lda+p1], bp, p1)
					continue
				}
				vek32.MatMul_Into(scratch, a[r*lda+p0:r*lda+p1], bp, p1-p0)
				vek32.Add_Inplace(cr, scratch)
			}
		}
	}
}

// blockNN computes rows [i0, i1) of c = a·b. The vek path needs n values of
// scratch.
func blockNN(c, a, b, scratch []float32, k, n, i0, i1 int) {
	if useVek {
		gemmVek(c[i0*n:], n, a[i0*k:], k, b, scratch, i1-i0, k, n)
		return
	}
	for i := i0; i < i1; i++ {
		ci := c[i*n : (i+1)*n]
		clear(ci)
		ai := a[i*k : (i+1)*k]
		for p, aip := range ai {
			bp := b[p*n : (p+1)*n]
			for j := range ci {
				ci[j] += float32(aip * bp[j])
			}
		}
	}
}

// blockNT computes rows [i0, i1), columns [j0, j1) of c = a·bᵀ. The vek
// path transposes rows j0…j1-1 of b into a k×(j1-j0) panel at the start of
// scratch and needs j1-j0 more values after it.
func blockNT(c, a, b, scratch []float32, k, n, i0, i1, j0, j1 int) {
	if !useVek {
		for i := i0; i < i1; i++ {
			ai := a[i*k : (i+1)*k]
			for j := j0; j < j1; j++ {
				bj := b[j*k : (j+1)*k]
				var s float32
				for p, x := range ai {
					s += float32(x * bj[p])
				}
				c[i*n+j] = s
			}
		}
		return
	}
	w := j1 - j0
	panel, rest := scratch[:k*w], scratch[k*w:]
	// Eight rows of b at a time: eight read streams, and 32-byte runs of
	// writes.
	for t := 0; t < w; t += 8 {
		rowsToCols(panel[t:], w, b[(j0+t)*k:], k, k, min(8, w-t))
	}
	gemmVek(c[i0*n+j0:], n, a[i0*k:], k, panel, rest, i1-i0, k, w)
}

// blockTN computes rows [i0, i1) of c = aᵀ·b, where a is k×m. The vek path
// gathers columns i0…i1-1 of a into the rows of an (i1-i0)×k panel at the
// start of scratch and needs n more values after it.
func blockTN(c, a, b, scratch []float32, m, k, n, i0, i1 int) {
	if !useVek {
		for i := i0; i < i1; i++ {
			ci := c[i*n : (i+1)*n]
			clear(ci)
			for p := 0; p < k; p++ {
				api := a[p*m+i]
				bp := b[p*n : (p+1)*n]
				for j := range ci {
					ci[j] += float32(api * bp[j])
				}
			}
		}
		return
	}
	w := i1 - i0
	panel, rest := scratch[:w*k], scratch[w*k:]
	// Eight columns at a time: eight write streams, which k·4 bytes apart
	// can share a cache set without evicting one another.
	for t := 0; t < w; t += 8 {
		colsToRows(panel[t*k:], k, a[i0+t:], m, k, min(8, w-t))
	}
	gemmVek(c[i0*n:], n, panel, k, b, rest, w, k, n)
}

// rowsToCols copies w <= 8 rows of length k, src[t·lds : t·lds+k], into
// columns t of dst, whose rows are ldd apart: dst[p·ldd+t] = src[t·lds+p].
func rowsToCols(dst []float32, ldd int, src []float32, lds, k, w int) {
	if w < 8 {
		for t := 0; t < w; t++ {
			for p, x := range src[t*lds : t*lds+k] {
				dst[p*ldd+t] = x
			}
		}
		return
	}
	s0, s1, s2, s3 := src[:k], src[lds:][:k], src[2*lds:][:k], src[3*lds:][:k]
	s4, s5, s6, s7 := src[4*lds:][:k], src[5*lds:][:k], src[6*lds:][:k], src[7*lds:][:k]
	for p := range s0 {
		d := dst[p*ldd:][:8]
		d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		d[4], d[5], d[6], d[7] = s4[p], s5[p], s6[p], s7[p]
	}
}

// colsToRows copies w <= 8 columns of src, whose rows are lds apart, into
// rows t of dst of length k, ldd apart: dst[t·ldd+p] = src[p·lds+t].
func colsToRows(dst []float32, ldd int, src []float32, lds, k, w int) {
	if w < 8 {
		for t := 0; t < w; t++ {
			d := dst[t*ldd : t*ldd+k]
			for p := range d {
				d[p] = src[p*lds+t]
			}
		}
		return
	}
	d0, d1, d2, d3 := dst[:k], dst[ldd:][:k], dst[2*ldd:][:k], dst[3*ldd:][:k]
	d4, d5, d6, d7 := dst[4*ldd:][:k], dst[5*ldd:][:k], dst[6*ldd:][:k], dst[7*ldd:][:k]
	for p := range d0 {
		s := src[p*lds:][:8]
		d0[p], d1[p], d2[p], d3[p] = s[0], s[1], s[2], s[3]
		d4[p], d5[p], d6[p], d7[p] = s[4], s[5], s[6], s[7]
	}
}
