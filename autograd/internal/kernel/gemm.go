package kernel

// asmKernel is the signature of the generated micro-kernels
// (kernel_amd64.s, from asmgen; amd64 only): an mr×w block of c from k steps
// of packed panels of a and b, laid out as packA and packB write them.
// next is the block of c the kernel after it will compute (rows ldc apart),
// which it prefetches.
type asmKernel func(k int, a, b, c *float32, ldc int, next *float32, load bool)

// asmKernelA is the signature of the generated micro-kernels that read A in
// place, lda floats apart, rather than from a packed panel (aLayout).
type asmKernelA func(k int, a *float32, lda int, b, c *float32, ldc int, next *float32, load bool)

// path is one implementation of the micro-kernel: generated assembly for a
// SIMD instruction set, or the Go loops.
type path struct {
	name string
	// mr is the most rows of c a micro-kernel holds; a block's last rows
	// go to the kernel for fewer rows.
	mr int
	// widths are the panel widths of b the micro-kernels take, ascending;
	// the last is the full width nr. A block's last columns go to the
	// narrowest width that holds them, zero-padded in the panel and
	// computed through a scratch tile when they do not fill it.
	widths []int
	// asm[mr-1][w] is the kernel for mr rows and widths[w] columns; nil on
	// the Go path.
	asm [][]asmKernel
	// cols[mr-1][w] and rows[mr-1][w] are the kernels that read A in
	// place (colsA, rowsA); nil on the Go path, which always packs.
	cols, rows [][]asmKernelA
	// colsMaxLd and rowsMaxLd are the largest distances, in floats,
	// between a's steps of k (MatMulTN) and between its rows (MatMulNN,
	// MatMulNT) at which the micro-kernels read a in place (layoutA).
	colsMaxLd, rowsMaxLd int
	// transpose4 and transpose8 pack 4 and 8 rows into interleaved
	// columns (transposer); nil on the Go path, which packs in Go.
	transpose4, transpose8 transposer
}

// transposer copies r rows of n values, src[i·lds+p], to dst[p·ldd+i] for
// i < r and p < n (r = 4 or 8, by function).
type transposer func(dst *float32, ldd int, src *float32, lds int, n int)

// nr returns the full panel width.
func (pt *path) nr() int { return pt.widths[len(pt.widths)-1] }

// width returns the index in widths of the narrowest panel that holds w
// columns, and that panel's width.
func (pt *path) width(w int) (int, int) {
	for x, pw := range pt.widths {
		if pw >= w {
			return x, pw
		}
	}
	return len(pt.widths) - 1, pt.nr()
}

// goPath is the pure-Go path: 4×4 register blocks, and narrower ones for
// the edges, so that its panels never need padding.
var goPath = &path{name: "go", mr: 4, widths: []int{1, 2, 3, 4}}

var (
	// paths lists the paths this machine can run, fastest first.
	paths = available()
	// active is the path the kernels run on: the fastest. Tests switch it.
	active = paths[0]
	// portables lists the paths this machine can run whose products have
	// the Go loops' bits (two roundings per step), fastest first; the last
	// is goPath.
	portables = availablePortable()
	// portable is the path of Path Portable: the fastest of portables.
	portable = portables[0]
)

// Cache blocking, for an AMD Zen 4 core (32 KiB L1d, 1 MiB L2, 32 MiB L3
// shared; docs/performance.md). A kc×nr panel of b (64 KiB on the AVX-512
// path, 32 KiB on AVX2, so from L1 and L2) serves every register block of
// rows of an mc×kc block of a (192 KiB, in L2); the kc×nc block of b a
// participant packs (up to 2 MiB) stays in L2 and L3 while its rows of a
// pass, and a is packed once per run of k when n <= nc. Each run of k loads
// and stores every block of c once, and at 1024³ c (4 MiB) no longer fits
// in L2: kc = 512 rather than 256 halves those passes, and made 1024³ 5-8 %
// faster on the AVX-512 path (the micro-kernels also prefetch the next
// block of c). mc from 96 to 192 measured within the noise of a shared
// machine. The sizes change speed only: the micro-kernels continue each
// element's chain of multiply-adds across runs of k, so the bits do not
// depend on them.
const (
	kc = 512
	mc = 96
	nc = 1024
)

// scratch is one participant's packing space, grown to the largest block
// seen.
type scratch struct {
	a, b []float32
	// tile receives a register block whose columns do not fill its panel.
	tile []float32
}

// Capacities of the scratch buffers that hold every block of every product:
// a packed panel of a (kc steps of at most mc rows), of b (kc steps of at
// most nc columns padded to a whole panel of at most 32) and a tile.
const (
	mostA    = kc * mc
	mostB    = kc * (nc + 32)
	mostTile = 12 * 32
)

// grow returns x with length n, reallocated only if its capacity is short,
// and then at once to the capacity most that every later call fits in: a
// participant's scratch allocates only on its first use, whichever products
// it happens to take part in later (which depends on timing when two
// threads share the work), so that steps allocate nothing after warm-up.
// Pages of the capacity no block writes are never touched.
func grow(x []float32, n, most int) []float32 {
	if cap(x) < n {
		return make([]float32, n, max(n, most))
	}
	return x[:n]
}

// aLayout is where a block's micro-kernels read a from.
type aLayout uint8

const (
	// packedA: panels of mr rows packed by packA.
	packedA aLayout = iota
	// colsA: MatMulTN's a (k×m) in place, A[i,p] at a[p·m+i].
	colsA
	// rowsA: MatMulNN's and MatMulNT's a (m×k) in place, A[i,p] at
	// a[i·k+p].
	rowsA
)

// layoutA returns where the micro-kernels of path pt read a from for op o's
// product with m rows and k steps: in place when its steps (TN, m floats
// apart) or rows (NN, NT, k floats apart) are at most pt.colsMaxLd or
// pt.rowsMaxLd floats apart, packed otherwise. The Go path always packs. It
// is a variable so that tests can make every layout run on every shape; the
// layouts give the same bits.
var layoutA = func(pt *path, o op, m, k int) aLayout {
	switch {
	case pt.cols == nil:
		return packedA
	case o == opTN && m <= pt.colsMaxLd:
		return colsA
	case o != opTN && k <= pt.rowsMaxLd:
		return rowsA
	}
	return packedA
}

// block computes rows [i0, i1), columns [j0, j1) of c for j's product, on
// path pt. For each run of kc steps of k it packs the run's rows of b for
// the block's columns into panels of nr columns (kc×nr each, step after
// step), then for each mc rows packs a into panels of mr rows (unless
// layoutA reads it in place), and calls the micro-kernel for every register
// block.
func (j *job) block(pt *path, i0, i1, j0, j1 int, s *scratch) {
	k, n := j.k, j.n
	nr := pt.nr()
	_, lastW := pt.width((j1 - j0) % nr)
	if (j1-j0)%nr == 0 {
		lastW = 0
	}
	bCols := (j1-j0)/nr*nr + lastW // packed width, padded
	lay := layoutA(pt, j.op, j.m, k)
	s.b = grow(s.b, min(kc, k)*bCols, mostB)
	if lay == packedA {
		s.a = grow(s.a, min(kc, k)*min(mc, i1-i0), mostA)
	}
	s.tile = grow(s.tile, pt.mr*nr, mostTile)
	for p0 := 0; p0 < k; p0 += kc {
		kb := min(kc, k-p0)
		j.packB(s.b, pt, kb, p0, j0, j1)
		for r0 := i0; r0 < i1; r0 += mc {
			mb := min(mc, i1-r0)
			if lay == packedA {
				j.packA(s.a, pt, kb, p0, r0, mb)
			}
			for jr := 0; jr < j1-j0; jr += nr {
				w := min(nr, j1-j0-jr)
				x, pw := pt.width(w)
				bp := s.b[jr*kb : (jr+pw)*kb]
				for ir := 0; ir < mb; ir += pt.mr {
					mr := min(pt.mr, mb-ir)
					c0 := (r0+ir)*n + j0 + jr
					// The block after this one: the next rows of this
					// panel, else the first rows of the next panel or
					// of the next mc rows.
					next := c0
					switch {
					case ir+mr < mb:
						next = c0 + mr*n
					case jr+nr < j1-j0:
						next = r0*n + j0 + jr + nr
					case r0+mb < i1:
						next = (r0+mb)*n + j0
					}
					cc, ldc := j.c[c0:], n
					if w != pw {
						cc, ldc = s.tile[:mr*pw], pw
						if p0 > 0 {
							for i := range mr {
								copy(cc[i*pw:i*pw+w], j.c[c0+i*n:])
							}
						}
					}
					switch lay {
					case colsA:
						pt.cols[mr-1][x](kb, &j.a[p0*j.m+r0+ir], j.m, &bp[0], &cc[0], ldc, &j.c[next], p0 > 0)
					case rowsA:
						pt.rows[mr-1][x](kb, &j.a[(r0+ir)*k+p0], k, &bp[0], &cc[0], ldc, &j.c[next], p0 > 0)
					default:
						ap := s.a[ir*kb : (ir+mr)*kb]
						pt.micro(x, kb, ap, bp, cc, ldc, &j.c[next], mr, pw, p0 > 0)
					}
					if w != pw {
						for i := range mr {
							copy(j.c[c0+i*n:c0+i*n+w], cc[i*pw:])
						}
					}
				}
			}
		}
	}
}

// micro runs the micro-kernel for an mr×widths[x] register block: c (rows
// ldc apart) is set to its value (load) or 0 plus the product of the packed
// panels a (kb×mr) and b (kb×w). next is the block of c computed after it,
// which the assembly kernels prefetch.
func (pt *path) micro(x, kb int, a, b, c []float32, ldc int, next *float32, mr, w int, load bool) {
	if pt.asm != nil {
		pt.asm[mr-1][x](kb, &a[0], &b[0], &c[0], ldc, next, load)
		return
	}
	gemmGo(kb, a, b, c, ldc, mr, w, load)
}

// packB copies rows [p0, p0+kb) of b, columns [j0, j1) (of bᵀ for NT),
// into dst as panels of pt's full width nr, the last panel as wide as
// pt.width gives and zero-padded: panel q holds dst[q·nr·kb + p·w + j] =
// B[p0+p, j0+q·nr+j].
func (j *job) packB(dst []float32, pt *path, kb, p0, j0, j1 int) {
	nr := pt.nr()
	if j.op != opNT { // b is k×n: rows of b are rows of the panels
		_, lastW := pt.width((j1 - j0) % nr)
		splitRows(dst, j.b[p0*j.n+j0:], j.n, kb, j1-j0, nr, lastW)
		return
	}
	for jr := 0; jr < j1-j0; jr += nr {
		w := min(nr, j1-j0-jr)
		_, pw := pt.width(w)
		d := dst[jr*kb : (jr+pw)*kb]
		c0 := j0 + jr
		// b is n×k: column p of bᵀ is row p's entries. Eight rows of b at
		// a time: eight read streams, and writes that run along d.
		jj := 0
		for ; pt.transpose8 != nil && jj+8 <= w; jj += 8 {
			pt.transpose8(&d[jj], pw, &j.b[(c0+jj)*j.k+p0], j.k, kb)
		}
		for ; jj+8 <= w; jj += 8 {
			src := j.b[(c0+jj)*j.k+p0:]
			s0, s1, s2, s3 := src[:kb], src[j.k:][:kb], src[2*j.k:][:kb], src[3*j.k:][:kb]
			s4, s5, s6, s7 := src[4*j.k:][:kb], src[5*j.k:][:kb], src[6*j.k:][:kb], src[7*j.k:][:kb]
			for p := range s0 {
				q := d[p*pw+jj:][:8]
				q[0], q[1], q[2], q[3] = s0[p], s1[p], s2[p], s3[p]
				q[4], q[5], q[6], q[7] = s4[p], s5[p], s6[p], s7[p]
			}
		}
		for ; jj < w; jj++ {
			for p, v := range j.b[(c0+jj)*j.k+p0:][:kb] {
				d[p*pw+jj] = v
			}
		}
		if w < pw {
			for p := range kb {
				clear(d[p*pw+w : (p+1)*pw])
			}
		}
	}
}

// packA copies rows [r0, r0+mb) of a (columns of a for TN), steps
// [p0, p0+kb), into dst as panels of pt.mr rows, the last one shorter:
// the panel for rows from r0+ir holds dst[ir·kb + p·mr + i] =
// A[r0+ir+i, p0+p].
func (j *job) packA(dst []float32, pt *path, kb, p0, r0, mb int) {
	if j.op == opTN { // a is k×m: row p holds column p of aᵀ
		splitRows(dst, j.a[p0*j.m+r0:], j.m, kb, mb, pt.mr, mb%pt.mr)
		return
	}
	for ir := 0; ir < mb; ir += pt.mr {
		mr := min(pt.mr, mb-ir)
		d := dst[ir*kb : (ir+mr)*kb]
		// Eight or four rows at a time, by the SIMD paths' transposes, or
		// four at a time, step after step, in Go: a few read streams,
		// and writes that run along d.
		i := 0
		for ; pt.transpose8 != nil && i+8 <= mr; i += 8 {
			pt.transpose8(&d[i], mr, &j.a[(r0+ir+i)*j.k+p0], j.k, kb)
		}
		for ; pt.transpose4 != nil && i+4 <= mr; i += 4 {
			pt.transpose4(&d[i], mr, &j.a[(r0+ir+i)*j.k+p0], j.k, kb)
		}
		for ; i+4 <= mr; i += 4 {
			src := j.a[(r0+ir+i)*j.k+p0:]
			s0, s1, s2, s3 := src[:kb], src[j.k:][:kb], src[2*j.k:][:kb], src[3*j.k:][:kb]
			for p := range s0 {
				q := d[p*mr+i:][:4]
				q[0], q[1], q[2], q[3] = s0[p], s1[p], s2[p], s3[p]
			}
		}
		for ; i < mr; i++ {
			for p, v := range j.a[(r0+ir+i)*j.k+p0:][:kb] {
				d[p*mr+i] = v
			}
		}
	}
}

// splitRows copies rows of cols values, src[p·lds+x] for p < rows and
// x < cols, into panels of full columns: panel q holds dst[q·full·rows +
// p·full + x'] = src[p·lds + q·full + x'], and the last panel, of the
// cols%full columns left (if any), is lastW wide, zero-padded. It goes
// through src row after row, so that it reads each row once, along memory,
// however many panels it fills. Full panels are copied as arrays, which
// costs less than copy's checks and call.
func splitRows(dst, src []float32, lds, rows, cols, full, lastW int) {
	nf := cols / full
	rest := cols - nf*full
	for p := range rows {
		s := src[p*lds:][:cols]
		o := p * full // of step p in panel 0
		switch full {
		case 32:
			for q := range nf {
				*(*[32]float32)(dst[o+q*32*rows:]) = *(*[32]float32)(s[q*32:])
			}
		case 16:
			for q := range nf {
				*(*[16]float32)(dst[o+q*16*rows:]) = *(*[16]float32)(s[q*16:])
			}
		case 12:
			for q := range nf {
				*(*[12]float32)(dst[o+q*12*rows:]) = *(*[12]float32)(s[q*12:])
			}
		case 6:
			for q := range nf {
				*(*[6]float32)(dst[o+q*6*rows:]) = *(*[6]float32)(s[q*6:])
			}
		case 4:
			for q := range nf {
				*(*[4]float32)(dst[o+q*4*rows:]) = *(*[4]float32)(s[q*4:])
			}
		default:
			for q := range nf {
				copy(dst[o+q*full*rows:][:full], s[q*full:])
			}
		}
		if rest > 0 {
			t := dst[nf*full*rows+p*lastW:][:lastW]
			copy(t, s[nf*full:])
			clear(t[rest:])
		}
	}
}

// gemmGo is the Go micro-kernel: it sets the mr×w block c (rows ldc apart)
// to its value (load) or 0 plus the product of the packed panels a (k×mr)
// and b (k×w), each element rounding every product and every sum in order
// of p.
func gemmGo(k int, a, b, c []float32, ldc, mr, w int, load bool) {
	if mr == 4 && w == 4 {
		gemmGo4x4(k, a, b, c, ldc, load)
		return
	}
	for i := range mr {
		for jj := range w {
			var s float32
			if load {
				s = c[i*ldc+jj]
			}
			for p := range k {
				s = float32(a[p*mr+i]*b[p*w+jj]) + s
			}
			c[i*ldc+jj] = s
		}
	}
}

// gemmGo4x4 is gemmGo for a full 4×4 block, its sixteen sums in variables.
func gemmGo4x4(k int, a, b, c []float32, ldc int, load bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	r0, r1, r2, r3 := c[:4], c[ldc:][:4], c[2*ldc:][:4], c[3*ldc:][:4]
	if load {
		c00, c01, c02, c03 = r0[0], r0[1], r0[2], r0[3]
		c10, c11, c12, c13 = r1[0], r1[1], r1[2], r1[3]
		c20, c21, c22, c23 = r2[0], r2[1], r2[2], r2[3]
		c30, c31, c32, c33 = r3[0], r3[1], r3[2], r3[3]
	}
	a, b = a[:4*k], b[:4*k]
	for p := 0; p < 4*k; p += 4 {
		ap, bp := a[p:p+4], b[p:p+4]
		a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00, c01, c02, c03 = float32(a0*b0)+c00, float32(a0*b1)+c01, float32(a0*b2)+c02, float32(a0*b3)+c03
		c10, c11, c12, c13 = float32(a1*b0)+c10, float32(a1*b1)+c11, float32(a1*b2)+c12, float32(a1*b3)+c13
		c20, c21, c22, c23 = float32(a2*b0)+c20, float32(a2*b1)+c21, float32(a2*b2)+c22, float32(a2*b3)+c23
		c30, c31, c32, c33 = float32(a3*b0)+c30, float32(a3*b1)+c31, float32(a3*b2)+c32, float32(a3*b3)+c33
	}
	r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
	r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
	r2[0], r2[1], r2[2], r2[3] = c20, c21, c22, c23
	r3[0], r3[1], r3[2], r3[3] = c30, c31, c32, c33
}
