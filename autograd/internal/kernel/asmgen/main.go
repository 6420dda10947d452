// Command asmgen generates the matrix micro-kernels of package kernel: the
// assembly in kernel_amd64.s and its Go declarations in stubs_amd64.go.
// Run it from this directory (its own module, so that modref does not depend
// on avo):
//
//	go run . -out ../kernel_amd64.s -stubs ../stubs_amd64.go -pkg kernel
//
// Every micro-kernel computes an mr×w block of c from a packed panel of a
// (kc steps of mr values: a[p·mr+i] = A[i,p]) and a packed panel of b (kc
// steps of w values: b[p·w+j] = B[p,j]), with w one or two vector widths,
// holding the block in registers. Each element of the block is one chain of
// fused multiply-adds in order of p, c = fma(A[i,p], B[p,j], c), starting
// from 0 (load false) or from the values in c (load true), so splitting k
// into runs and calling the kernel once per run gives the bits of one call.
//
// The MulAdd micro-kernels (packed panels only) compute the chain of the Go
// loops instead, c = float32(A[i,p]·B[p,j]) + c: a multiply and then an add,
// each rounded, never fused, so that kernel.Portable runs at SIMD speed with
// the Go loops' bits.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Register blocking. AVX-512 has 32 vector registers: 12 rows × 2 vectors of
// 16 accumulators (24) and 2 for the row of b; the rows of a are broadcast
// from memory by the FMA itself. AVX2 has 16: 6 rows × 2 vectors of 8 (12),
// 2 for b and 1 for the broadcast value of a.
const (
	mrAVX512 = 12
	mrAVX2   = 6
)

func main() {
	for _, lay := range []aLayout{packedA, colsA, rowsA} {
		kernels(lay, true)
	}
	kernels(packedA, false)
	transpose(8)
	transpose(4)
	gelu()
	for _, sum := range []bool{false, true} {
		exp("AVX512", 8, sum)
		exp("AVX2", 4, sum)
	}
	div("AVX512", 8)
	div("AVX2", 4)
	maxf32("AVX512", 8)
	maxf32("AVX2", 4)
	absMax("AVX512", 16)
	absMax("AVX2", 8)
	scaleShifted("AVX512", 8)
	scaleShifted("AVX2", 4)
	Generate()
}

// kernels emits the micro-kernels of both instruction sets for layout lay,
// of every height and both widths, fused or not (kernel).
func kernels(lay aLayout, fused bool) {
	for mr := 1; mr <= mrAVX512; mr++ {
		for nv := 1; nv <= 2; nv++ {
			kernel("AVX512", lay, mr, nv, 16, fused)
		}
	}
	for mr := 1; mr <= mrAVX2; mr++ {
		for nv := 1; nv <= 2; nv++ {
			kernel("AVX2", lay, mr, nv, 8, fused)
		}
	}
}

// vectors returns a maker of new virtual vector registers: ZMM registers
// for AVX-512 code, YMM registers for AVX2 code.
func vectors(avx512 bool) func() reg.VecVirtual {
	if avx512 {
		return func() reg.VecVirtual { return ZMM() }
	}
	return func() reg.VecVirtual { return YMM() }
}

// transpose emits transpose<r>AVX, which packs r rows of a matrix into
// interleaved columns with AVX shuffles, eight columns at a time.
func transpose(r int) {
	name := fmt.Sprintf("transpose%dAVX", r)
	TEXT(name, NOSPLIT, "func(dst *float32, ldd int, src *float32, lds int, n int)")
	Doc(fmt.Sprintf("%s copies %d rows of n values, src[i·lds+p], to dst[p·ldd+i] for i < %d and p < n.", name, r, r))
	dst := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	src := Load(Param("src"), GP64())
	lds := Load(Param("lds"), GP64())
	n := Load(Param("n"), GP64())
	SHLQ(U8(2), ldd)
	SHLQ(U8(2), lds)
	ldd8 := GP64() // 8 rows of dst
	MOVQ(ldd, ldd8)
	SHLQ(U8(3), ldd8)
	lds3 := GP64()
	LEAQ(Mem{Base: lds, Index: lds, Scale: 2}, lds3)
	// row returns the address of src row i at the current column.
	src4 := GP64()
	LEAQ(Mem{Base: src, Index: lds, Scale: 4}, src4)
	row := func(i int) Mem {
		base := src
		if i >= 4 {
			base, i = src4, i-4
		}
		switch i {
		case 0:
			return Mem{Base: base}
		case 1:
			return Mem{Base: base, Index: lds, Scale: 1}
		case 2:
			return Mem{Base: base, Index: lds, Scale: 2}
		}
		return Mem{Base: base, Index: lds3, Scale: 1}
	}
	// out returns the address of dst row p (of the current eight).
	d := GP64()
	Label("loop")
	CMPQ(n, U8(8))
	JL(LabelRef("tail"))
	rs := make([]reg.VecVirtual, r)
	for i := range rs {
		rs[i] = YMM()
		VMOVUPS(row(i), rs[i])
	}
	// Pairs of rows interleaved, then pairs of pairs: u[q] holds rows
	// 4h…4h+3 of columns q (low lane) and q+4 (high lane) for h = q/4.
	var cols [][]reg.VecVirtual // cols[h][q], q < 4
	for h := 0; h < r/4; h++ {
		r0, r1, r2, r3 := rs[4*h], rs[4*h+1], rs[4*h+2], rs[4*h+3]
		t0, t1, t2, t3 := YMM(), YMM(), YMM(), YMM()
		VUNPCKLPS(r1, r0, t0)
		VUNPCKHPS(r1, r0, t1)
		VUNPCKLPS(r3, r2, t2)
		VUNPCKHPS(r3, r2, t3)
		u := []reg.VecVirtual{YMM(), YMM(), YMM(), YMM()}
		VSHUFPS(U8(0x44), t2, t0, u[0])
		VSHUFPS(U8(0xEE), t2, t0, u[1])
		VSHUFPS(U8(0x44), t3, t1, u[2])
		VSHUFPS(U8(0xEE), t3, t1, u[3])
		cols = append(cols, u)
	}
	MOVQ(dst, d)
	for q := 0; q < 8; q++ {
		lane := q / 4
		if r == 8 {
			o := YMM()
			if lane == 0 {
				VPERM2F128(U8(0x20), cols[1][q%4], cols[0][q%4], o)
			} else {
				VPERM2F128(U8(0x31), cols[1][q%4], cols[0][q%4], o)
			}
			VMOVUPS(o, Mem{Base: d})
		} else if lane == 0 {
			VMOVUPS(cols[0][q].AsX(), Mem{Base: d})
		} else {
			VEXTRACTF128(U8(1), cols[0][q%4], Mem{Base: d})
		}
		if q < 7 {
			ADDQ(ldd, d)
		}
	}
	ADDQ(U8(32), src)
	ADDQ(U8(32), src4)
	ADDQ(ldd8, dst)
	SUBQ(U8(8), n)
	JMP(LabelRef("loop"))

	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	x := XMM()
	for i := 0; i < r; i++ {
		VMOVSS(row(i), x)
		VMOVSS(x, Mem{Base: dst, Disp: 4 * i})
	}
	ADDQ(U8(4), src)
	ADDQ(U8(4), src4)
	ADDQ(ldd, dst)
	DECQ(n)
	JMP(LabelRef("tail"))
	Label("done")
	VZEROUPPER()
	RET()
}

// unroll is how many steps of p the main loop takes per iteration.
const unroll = 4

// aLayout is where a micro-kernel finds A[i,p], the value row i of the
// register block multiplies step p of b by.
type aLayout int

const (
	// packedA: a panel packed by packA, a[p·mr+i].
	packedA aLayout = iota
	// colsA: columns of A in place, rows lda floats apart: a[p·lda+i]
	// (the k×m operand of MatMulTN, read without packing).
	colsA
	// rowsA: rows of A in place, lda floats apart: a[i·lda+p] (the
	// row-major m×k operand of MatMulNN and MatMulNT, read without packing).
	rowsA
)

// kernel emits gemm<isa><layout>_<mr>x<w> for w = nv·lanes, whose steps
// are fused multiply-adds (fused), or gemm<isa>MulAdd_<mr>x<w> (packedA
// only), whose steps are a multiply and an add, each rounded: the Go loops'
// chain.
func kernel(isa string, lay aLayout, mr, nv, lanes int, fused bool) {
	w := nv * lanes
	suffix := [...]string{"", "Cols", "Rows"}[lay]
	how := isa + " FMAs"
	if !fused {
		suffix = "MulAdd"
		how = isa + " multiplies and adds (each product rounded, then added: the Go loops' chain)"
	}
	name := fmt.Sprintf("gemm%s%s_%dx%d", isa, suffix, mr, w)
	what := [...]string{
		fmt.Sprintf("the packed panels a (k×%d) and b (k×%d)", mr, w),
		fmt.Sprintf("A (its k columns of %d values lda floats apart) and the packed panel b (k×%d)", mr, w),
		fmt.Sprintf("A (%d rows of k values lda floats apart) and the packed panel b (k×%d)", mr, w),
	}[lay]
	if lay == packedA {
		TEXT(name, NOSPLIT, "func(k int, a, b, c *float32, ldc int, next *float32, load bool)")
	} else {
		TEXT(name, NOSPLIT, "func(k int, a *float32, lda int, b, c *float32, ldc int, next *float32, load bool)")
	}
	Doc(fmt.Sprintf("%s sets the %d×%d block of c (rows ldc floats apart) to its value (load) or 0, plus the product of %s, with %s in order of k. It prefetches the block at next (rows ldc apart) into L2.", name, mr, w, what, how))
	vec := vectors(lanes == 16)
	k := Load(Param("k"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	var lda, lda3 reg.Register
	var bases []reg.Register // rowsA: rows 0, 4, 8 of the block
	if lay != packedA {
		lda = Load(Param("lda"), GP64())
		SHLQ(U8(2), lda)
		lda3 = GP64()
		LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)
	}
	if lay == rowsA {
		bases = append(bases, pa)
		for r := 4; r < mr; r += 4 {
			b := GP64()
			LEAQ(Mem{Base: bases[len(bases)-1], Index: lda, Scale: 4}, b)
			bases = append(bases, b)
		}
	}
	// am returns the address of A[i, p0+u] for the current p0.
	am := func(u, i int) Mem {
		switch lay {
		case colsA:
			m := Mem{Base: pa, Disp: 4 * i}
			switch u {
			case 1:
				m.Index, m.Scale = lda, 1
			case 2:
				m.Index, m.Scale = lda, 2
			case 3:
				m.Index, m.Scale = lda3, 1
			}
			return m
		case rowsA:
			m := Mem{Base: bases[i/4], Disp: 4 * u}
			switch i % 4 {
			case 1:
				m.Index, m.Scale = lda, 1
			case 2:
				m.Index, m.Scale = lda, 2
			case 3:
				m.Index, m.Scale = lda3, 1
			}
			return m
		}
		return Mem{Base: pa, Disp: 4 * (u*mr + i)}
	}
	// advance moves a past s steps of p (s = 1 or unroll).
	advance := func(s int) {
		switch lay {
		case colsA:
			if s == 1 {
				ADDQ(lda, pa)
			} else {
				LEAQ(Mem{Base: pa, Index: lda, Scale: uint8(s)}, pa)
			}
		case rowsA:
			for _, b := range bases {
				ADDQ(U8(4*s), b)
			}
		default:
			ADDQ(U32(4*s*mr), pa)
		}
	}
	acc := make([][]reg.VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for v := range acc[i] {
			acc[i][v] = vec()
		}
	}
	bv := make([]reg.VecVirtual, nv)
	for v := range bv {
		bv[v] = vec()
	}
	var bc reg.VecVirtual // AVX2: the broadcast element of a
	if lanes == 8 {
		bc = vec()
	}
	row := GP64()

	// The next block's rows, first and last byte of each, into L2 while
	// this block computes, so that its loads and stores of c do not wait
	// for memory.
	Load(Param("next"), row)
	for i := 0; i < mr; i++ {
		PREFETCHT1(Mem{Base: row})
		PREFETCHT1(Mem{Base: row, Disp: 4*w - 4})
		if i < mr-1 {
			ADDQ(ldc, row)
		}
	}

	load := Load(Param("load"), GP8())
	TESTB(load, load)
	JZ(LabelRef("zero"))
	MOVQ(pc, row)
	for i := range acc {
		for v := range acc[i] {
			VMOVUPS(Mem{Base: row, Disp: 4 * lanes * v}, acc[i][v])
		}
		if i < mr-1 {
			ADDQ(ldc, row)
		}
	}
	JMP(LabelRef("loop"))
	Label("zero")
	for i := range acc {
		for v := range acc[i] {
			if lanes == 16 {
				VPXORD(acc[i][v], acc[i][v], acc[i][v]) // VXORPS on ZMM would need AVX512DQ
			} else {
				VXORPS(acc[i][v], acc[i][v], acc[i][v])
			}
		}
	}

	step := func(u int) {
		for v := range bv {
			VMOVUPS(Mem{Base: pb, Disp: 4 * (u*w + v*lanes)}, bv[v])
		}
		for i := range acc {
			switch {
			case fused && lanes == 16:
				for v := range bv {
					VFMADD231PS_BCST(am(u, i), bv[v], acc[i][v])
				}
			case fused:
				VBROADCASTSS(am(u, i), bc)
				for v := range bv {
					VFMADD231PS(bc, bv[v], acc[i][v])
				}
			case lanes == 16:
				for v := range bv {
					t := vec()
					VMULPS_BCST(am(u, i), bv[v], t)
					VADDPS(t, acc[i][v], acc[i][v])
				}
			default:
				VBROADCASTSS(am(u, i), bc)
				for v := range bv {
					t := vec()
					VMULPS(bc, bv[v], t)
					VADDPS(t, acc[i][v], acc[i][v])
				}
			}
		}
	}
	Label("loop")
	CMPQ(k, U8(unroll))
	JL(LabelRef("tail"))
	for u := range unroll {
		step(u)
	}
	advance(unroll)
	ADDQ(U32(4*unroll*w), pb)
	SUBQ(U8(unroll), k)
	JMP(LabelRef("loop"))
	Label("tail")
	TESTQ(k, k)
	JZ(LabelRef("store"))
	step(0)
	advance(1)
	ADDQ(U32(4*w), pb)
	DECQ(k)
	JMP(LabelRef("tail"))

	Label("store")
	for i := range acc {
		for v := range acc[i] {
			VMOVUPS(acc[i][v], Mem{Base: pc, Disp: 4 * lanes * v})
		}
		if i < mr-1 {
			ADDQ(ldc, pc)
		}
	}
	VZEROUPPER()
	RET()
}
