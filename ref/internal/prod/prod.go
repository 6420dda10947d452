// Package prod is ref's float64 matrix product: C = op(A)·op(B) with every
// element the bits of the plain loop
//
//	s := 0.0 // or c[i][j], to continue a chain
//	for p := 0; p < k; p++ {
//		s += float64(a[i][p] * b[p][j])
//	}
//
// that is, each product rounded on its own (no fused multiply-add, see
// docs/design.md, "Reproducibility and fused multiply-add") and added in
// ascending order of p. Speed comes only from doing many such chains at
// once: the operands are packed into panels (four rows of A; four or eight
// columns of B), a register block of 4×4 or 4×8 elements of C advances its
// chains together, k is cut into blocks whose partial sums are stored in C
// and continued, and blocks of rows of C go to different goroutines. None
// of these changes a chain, so the bits do not depend on the block sizes,
// on GOMAXPROCS or on the transposition of the operands.
//
// The register block runs on one of three paths, chosen once by CPU
// feature: generated AVX-512 or AVX2 code (asmgen, 4×8 blocks; per lane a
// rounded VMULPD and then a rounded VADDPD, never a fused multiply-add), or
// the Go kernel (4×4) on every other machine. Each lane computes exactly
// the Go loop's operations, each correctly rounded, so every path gives the
// same bits (TestMulIsThePlainLoop runs each path of the machine); only a
// NaN's payload, when two NaNs meet, is the processor's choice.
package prod

import (
	"fmt"
	"runtime"
	"sync"
)

// Block sizes: kc steps of k per packed panel (a 4-wide panel of B is
// kc·4·8 = 8 KiB, several fit in L1), nc columns of B per packed block
// (kc·nc·8 = 512 KiB, in L2), and rows of C per goroutine task.
const (
	kc       = 256
	nc       = 256
	rowsTask = 32
)

// smallProduct is the number of multiply-adds up to which Mul runs the
// loops in place, without packing.
const smallProduct = 1 << 13

// minParallel is the number of multiply-adds below which Mul does not start
// goroutines.
const minParallel = 1 << 16

// Matrix is a row-major view of an operand: element (i, j) of the stored
// matrix is Data[i*Stride+j]. With T set the operand is the transpose of the
// stored matrix.
type Matrix struct {
	Data   []float64
	Stride int
	T      bool
}

// at returns element (i, j) of the operand (after transposition).
func (x Matrix) at(i, j int) float64 {
	if x.T {
		return x.Data[j*x.Stride+i]
	}
	return x.Data[i*x.Stride+j]
}

// check panics unless the operand holds an r×c matrix (after
// transposition): a bad shape is a programmer error.
func (x Matrix) check(name string, r, c int) {
	if x.T {
		r, c = c, r
	}
	if r == 0 || c == 0 {
		return
	}
	if x.Stride < c || len(x.Data) < (r-1)*x.Stride+c {
		panic(fmt.Sprintf("prod: %s holds %d values with stride %d, too few for %d×%d", name, len(x.Data), x.Stride, r, c))
	}
}

// path is a micro-kernel and the width nr of the panels of b it reads: it
// continues the chains of a full 4×nr block of c (rows ldc apart) with kb
// steps of packed panels of a (kb×4) and b (kb×nr).
type path struct {
	name   string
	nr     int
	kernel func(kb int, a, b, c []float64, ldc int)
}

// goPath is the Go kernel, on every machine.
var goPath = &path{name: "go", nr: 4, kernel: kernel4x4}

// active is the path Mul uses: the first of paths (the generated code of
// this machine's widest vectors, or the Go kernel). Every path gives the
// same bits.
var active = paths[0]

// Mul sets c (m×n, rows ldc apart) to a·b, a being m×k and b k×n after
// their transpositions, each element the loop of the package documentation
// from s = 0, or from s = c[i][j] when add is set (so c += a·b continues
// each chain). c must not overlap a or b.
func Mul(m, n, k int, a, b Matrix, c []float64, ldc int, add bool) {
	a.check("a", m, k)
	b.check("b", k, n)
	if m == 0 || n == 0 {
		return
	}
	if ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("prod: c holds %d values with stride %d, too few for %d×%d", len(c), ldc, m, n))
	}
	if !add {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	if k == 0 {
		return
	}
	if m*n*k <= smallProduct {
		mulSmall(m, n, k, a, b, c, ldc)
		return
	}
	tasks := (m + rowsTask - 1) / rowsTask
	workers := min(runtime.GOMAXPROCS(0), tasks)
	if m*n*k < minParallel {
		workers = 1
	}
	scratches := make([]*scratch, workers)
	for w := range scratches {
		scratches[w] = newScratch(m, k)
	}
	// Each block of b (kc steps × nc columns) is packed once and shared;
	// the tasks of rowsTask rows of c pack their own panels of a.
	pt := active
	pb := make([]float64, min(kc, k)*roundUp(min(nc, n), pt.nr))
	for p0 := 0; p0 < k; p0 += kc {
		kb := min(kc, k-p0)
		for j0 := 0; j0 < n; j0 += nc {
			nb := min(nc, n-j0)
			packB(pb, b, p0, kb, j0, nb, pt.nr)
			task := func(t int, s *scratch) {
				i0 := t * rowsTask
				mulBlock(pt, i0, min(i0+rowsTask, m), p0, kb, j0, nb, a, pb, c, ldc, s)
			}
			Run(workers, tasks, func(w, t int) { task(t, scratches[w]) })
		}
	}
}

// Run calls f(w, t) once for every task t < tasks, on workers goroutines
// that take the tasks in turn (w, below workers, names the goroutine); with
// workers <= 1, in order on the caller's goroutine. It returns when every
// call has.
func Run(workers, tasks int, f func(w, t int)) {
	if workers <= 1 {
		for t := range tasks {
			f(0, t)
		}
		return
	}
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				t := next
				next++
				mu.Unlock()
				if t >= tasks {
					return
				}
				f(w, t)
			}
		}()
	}
	wg.Wait()
}

// scratch is one goroutine's buffer for panels of a.
type scratch struct {
	a []float64
}

// newScratch returns the buffer for panels of a of a product m×·×k, no
// larger than it needs: small products are frequent (finite differences
// run the block millions of times at d = 8).
func newScratch(m, k int) *scratch {
	return &scratch{a: make([]float64, min(kc, k)*roundUp(min(rowsTask, m), 4))}
}

// roundUp rounds n up to a multiple of w.
func roundUp(n, w int) int { return (n + w - 1) / w * w }

// mulBlock adds into rows i0..i1-1 (at most rowsTask) and columns
// j0..j0+nb-1 of c the products over steps p0..p0+kb-1 of a and of the
// block pb of b packed in panels of pt.nr columns.
func mulBlock(pt *path, i0, i1, p0, kb, j0, nb int, a Matrix, pb, c []float64, ldc int, s *scratch) {
	mb := i1 - i0
	nr := pt.nr
	packA(s.a, a, i0, mb, p0, kb)
	for i := 0; i < mb; i += 4 {
		mr := min(4, mb-i)
		pa := s.a[i*kb : i*kb+4*kb]
		for j := 0; j < nb; j += nr {
			w := min(nr, nb-j)
			pbj := pb[j*kb : j*kb+nr*kb]
			cij := c[(i0+i)*ldc+j0+j:]
			if mr == 4 && w == nr {
				pt.kernel(kb, pa, pbj, cij, ldc)
			} else {
				kernelEdge(kb, pa, pbj, cij, ldc, mr, w, nr)
			}
		}
	}
}

// packA copies rows i0..i0+mb-1, steps p0..p0+kb-1 of a into panels of 4
// rows: panel q holds, for each step p, the 4 values a[i0+4q+r][p0+p],
// zero past the last row.
func packA(dst []float64, a Matrix, i0, mb, p0, kb int) {
	for q := 0; q < mb; q += 4 {
		panel := dst[q*kb : q*kb+4*kb]
		for r := 0; r < 4; r++ {
			if q+r >= mb {
				for p := 0; p < kb; p++ {
					panel[4*p+r] = 0
				}
				continue
			}
			i := i0 + q + r
			if a.T {
				for p := 0; p < kb; p++ {
					panel[4*p+r] = a.Data[(p0+p)*a.Stride+i]
				}
			} else {
				row := a.Data[i*a.Stride+p0 : i*a.Stride+p0+kb]
				for p, v := range row {
					panel[4*p+r] = v
				}
			}
		}
	}
}

// packB copies steps p0..p0+kb-1, columns j0..j0+nb-1 of b into panels of
// nr columns: panel q holds, for each step p, b[p0+p][j0+q·nr ..
// j0+q·nr+nr-1], zero past the last column.
func packB(dst []float64, b Matrix, p0, kb, j0, nb, nr int) {
	for q := 0; q < nb; q += nr {
		panel := dst[q*kb : q*kb+nr*kb]
		w := min(nr, nb-q)
		if w < nr {
			clear(panel)
		}
		for r := 0; r < w; r++ {
			j := j0 + q + r
			if b.T {
				col := b.Data[j*b.Stride+p0 : j*b.Stride+p0+kb]
				for p, v := range col {
					panel[nr*p+r] = v
				}
				continue
			}
			for p := 0; p < kb; p++ {
				panel[nr*p+r] = b.Data[(p0+p)*b.Stride+j]
			}
		}
	}
}

// kernel4x4 continues the sixteen chains of the 4×4 block of c (rows ldc
// apart) with kb steps of the packed panels a and b.
func kernel4x4(kb int, a, b, c []float64, ldc int) {
	r0, r1, r2, r3 := c[:4], c[ldc:][:4], c[2*ldc:][:4], c[3*ldc:][:4]
	c00, c01, c02, c03 := r0[0], r0[1], r0[2], r0[3]
	c10, c11, c12, c13 := r1[0], r1[1], r1[2], r1[3]
	c20, c21, c22, c23 := r2[0], r2[1], r2[2], r2[3]
	c30, c31, c32, c33 := r3[0], r3[1], r3[2], r3[3]
	a, b = a[:4*kb], b[:4*kb]
	for p := 0; p < 4*kb; p += 4 {
		ap, bp := a[p:p+4], b[p:p+4]
		a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00 += float64(a0 * b0)
		c01 += float64(a0 * b1)
		c02 += float64(a0 * b2)
		c03 += float64(a0 * b3)
		c10 += float64(a1 * b0)
		c11 += float64(a1 * b1)
		c12 += float64(a1 * b2)
		c13 += float64(a1 * b3)
		c20 += float64(a2 * b0)
		c21 += float64(a2 * b1)
		c22 += float64(a2 * b2)
		c23 += float64(a2 * b3)
		c30 += float64(a3 * b0)
		c31 += float64(a3 * b1)
		c32 += float64(a3 * b2)
		c33 += float64(a3 * b3)
	}
	r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
	r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
	r2[0], r2[1], r2[2], r2[3] = c20, c21, c22, c23
	r3[0], r3[1], r3[2], r3[3] = c30, c31, c32, c33
}

// kernelEdge continues the chains of the mr×w block at an edge of c
// (mr <= 4, w <= nr) with kb steps of the packed panels a (kb×4) and b
// (kb×nr).
func kernelEdge(kb int, a, b, c []float64, ldc, mr, w, nr int) {
	for r := 0; r < mr; r++ {
		for j := 0; j < w; j++ {
			s := c[r*ldc+j]
			for p := 0; p < kb; p++ {
				s += float64(a[4*p+r] * b[nr*p+j])
			}
			c[r*ldc+j] = s
		}
	}
}

// mulSmall adds a·b into c with loops over the operands in place: for each
// row of c, each step p in order adds its products to the whole row, so
// each element's chain is in order of p.
func mulSmall(m, n, k int, a, b Matrix, c []float64, ldc int) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		if b.T {
			for j := range ci {
				s := ci[j]
				bj := b.Data[j*b.Stride:]
				if a.T {
					for p := 0; p < k; p++ {
						s += float64(a.Data[p*a.Stride+i] * bj[p])
					}
				} else {
					ai := a.Data[i*a.Stride : i*a.Stride+k]
					for p, v := range ai {
						s += float64(v * bj[p])
					}
				}
				ci[j] = s
			}
			continue
		}
		for p := 0; p < k; p++ {
			aip := a.at(i, p)
			bp := b.Data[p*b.Stride : p*b.Stride+n]
			for j, v := range bp {
				ci[j] += float64(aip * v)
			}
		}
	}
}
