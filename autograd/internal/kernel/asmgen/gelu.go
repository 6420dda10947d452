package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The GELU kernels: GELUForward and GELUBackward of package kernel
// (gelu.go) over n elements, n a multiple of the lanes, with the float32
// operations of GELUEval in its order, lane by lane, so that they give its
// bits: the piece index min(trunc((x − geluLo)·geluPerUnit), pieces−1), the
// degree-8 Horner chain in u = x − centre as separate multiplies and adds
// (never FMA), then 0 below geluLo, 1 from −geluLo on and x itself for NaN.
// The operand order of each multiply and add is that of the Go loops
// (x·Φ; (Φ'·g) + dx), which decides which NaN comes out when both are NaN.
//
// The table (kernel.geluTable) is coefficient-major: 32 float32 per row,
// the centres first, then the 9 rows of Φ and the 9 of Φ + x·φ.
const (
	geluPieces  = 32
	geluDeg     = 8
	geluRow     = 4 * geluPieces          // bytes per row of the table
	geluPhiOff  = geluRow                 // first row of Φ
	geluDerOff  = geluRow * (geluDeg + 2) // first row of Φ + x·φ
	geluLoBits  = 0xC1000000              // float32(−8), geluLo
	geluPerBits = 0x40000000              // float32(2), geluPerUnit
	geluHiBits  = 0x41000000              // float32(8), −geluLo
	geluOneBits = 0x3F800000              // float32(1)
)

// Comparison predicates of VCMPPS: less than and greater or equal, false
// for NaN (ordered); not less than, true for NaN; unordered, true only for
// NaN.
const (
	cmpLTOQ   = 0x11
	cmpNLTUQ  = 0x05
	cmpGEOQ   = 0x1D
	cmpUnordQ = 0x03
)

// gelu emits the four GELU kernels: forward and backward, AVX-512 and AVX2.
func gelu() {
	for _, deriv := range []bool{false, true} {
		geluKernel("AVX512", 16, deriv)
		geluKernel("AVX2", 8, deriv)
	}
}

// geluKernel emits geluForward<isa> or geluBackward<isa>.
func geluKernel(isa string, lanes int, deriv bool) {
	vec := vectors(lanes == 16)
	var name string
	if deriv {
		name = "geluBackward" + isa
		TEXT(name, NOSPLIT, "func(dst, grad, x *float32, n int, tab *float32)")
		Doc(fmt.Sprintf("%s adds grad[i]·(Φ(x[i]) + x[i]·φ(x[i])) into dst[i] for i < n, a multiple of %d, with the table tab of kernel.geluTab, bit for bit as GELUBackward's Go loop.", name, lanes))
	} else {
		name = "geluForward" + isa
		TEXT(name, NOSPLIT, "func(y, x *float32, n int, tab *float32)")
		Doc(fmt.Sprintf("%s sets y[i] = x[i]·Φ(x[i]) for i < n, a multiple of %d, with the table tab of kernel.geluTab, bit for bit as GELUForward's Go loop.", name, lanes))
	}
	Pragma("noescape")
	var py, pdx, pg reg.Register
	if deriv {
		pdx = Load(Param("dst"), GP64())
		pg = Load(Param("grad"), GP64())
	} else {
		py = Load(Param("y"), GP64())
	}
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	tab := Load(Param("tab"), GP64())
	coef := geluPhiOff
	if deriv {
		coef = geluDerOff
	}

	// Constants, broadcast from general registers.
	bcast := func(bits uint32) reg.VecVirtual {
		r := GP32()
		MOVL(U32(bits), r)
		v := vec()
		if lanes == 16 {
			VPBROADCASTD(r, v)
		} else {
			VMOVD(r, v.AsX())
			VPBROADCASTD(v.AsX(), v)
		}
		return v
	}
	lo := bcast(geluLoBits)
	perUnit := bcast(geluPerBits)
	last := bcast(geluPieces - 1)
	hi := bcast(geluHiBits)
	one := bcast(geluOneBits)

	// lookup returns the table's row at byte offset off, at each lane's
	// piece idx. AVX-512 holds the ten rows it needs in pairs of registers
	// (pieces 0-15, 16-31) and selects with VPERMT2PS, which reads the low 5
	// bits of idx. AVX2 permutes each quarter of the row (8 pieces) from
	// memory with VPERMPS, which reads the low 3 bits, and chooses among
	// the quarters by bits 3 (sel[0]) and 4 (sel[1]) of idx, shifted into the
	// sign bit that VBLENDVPS reads.
	var lookup func(off int, idx reg.VecVirtual) reg.VecVirtual
	var zero reg.VecVirtual
	var sel [2]reg.VecVirtual
	if lanes == 16 {
		rows := make(map[int][2]reg.VecVirtual)
		load := func(off int) {
			a, b := vec(), vec()
			VMOVUPS(Mem{Base: tab, Disp: off}, a)
			VMOVUPS(Mem{Base: tab, Disp: off + 64}, b)
			rows[off] = [2]reg.VecVirtual{a, b}
		}
		load(0)
		for k := 0; k <= geluDeg; k++ {
			load(coef + k*geluRow)
		}
		lookup = func(off int, idx reg.VecVirtual) reg.VecVirtual {
			v := vec()
			VMOVAPS(rows[off][0], v)
			VPERMT2PS(rows[off][1], idx, v)
			return v
		}
	} else {
		zero = vec()
		VPXOR(zero, zero, zero)
		lookup = func(off int, idx reg.VecVirtual) reg.VecVirtual {
			var q [4]reg.VecVirtual
			for j := range q {
				q[j] = vec()
				VPERMPS(Mem{Base: tab, Disp: off + 32*j}, idx, q[j])
			}
			VBLENDVPS(sel[0], q[1], q[0], q[0])
			VBLENDVPS(sel[0], q[3], q[2], q[2])
			VBLENDVPS(sel[1], q[2], q[0], q[0])
			return q[0]
		}
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	x := vec()
	VMOVUPS(Mem{Base: px}, x)
	// idx = min(trunc((x − lo)·perUnit), pieces − 1). For NaN, ±Inf and x
	// outside [lo, −lo) it may be anything (negative, or the integer
	// indefinite 0x80000000): the permutes read only its low bits, and the
	// lane's result is replaced below.
	idx := vec()
	VSUBPS(lo, x, idx)
	VMULPS(perUnit, idx, idx)
	VCVTTPS2DQ(idx, idx)
	VPMINSD(last, idx, idx)
	if lanes == 8 {
		sel[0], sel[1] = vec(), vec()
		VPSLLD(U8(28), idx, sel[0])
		VPSLLD(U8(27), idx, sel[1])
	}
	u := lookup(0, idx)
	VSUBPS(u, x, u)
	y := lookup(coef+geluDeg*geluRow, idx)
	for k := geluDeg - 1; k >= 0; k-- {
		c := lookup(coef+k*geluRow, idx)
		VMULPS(u, y, y) // y·u
		VADDPS(c, y, y) // + c[k]
	}
	// Special cases: 0 below lo, 1 from −lo on, x for NaN.
	if lanes == 16 {
		k := K()
		VCMPPS(U8(cmpNLTUQ), lo, x, k) // !(x < lo)
		VMOVAPS_Z(y, k, y)
		VCMPPS(U8(cmpGEOQ), hi, x, k) // x >= −lo
		VMOVAPS(one, k, y)
		VCMPPS(U8(cmpUnordQ), x, x, k) // NaN
		VMOVAPS(x, k, y)
	} else {
		m := vec()
		VCMPPS(U8(cmpLTOQ), lo, x, m)
		VBLENDVPS(m, zero, y, y)
		VCMPPS(U8(cmpGEOQ), hi, x, m)
		VBLENDVPS(m, one, y, y)
		VCMPPS(U8(cmpUnordQ), x, x, m)
		VBLENDVPS(m, x, y, y)
	}
	if deriv {
		g := vec()
		VMOVUPS(Mem{Base: pg}, g)
		VMULPS(g, y, y)              // Φ'·g
		VADDPS(Mem{Base: pdx}, y, y) // + dx
		VMOVUPS(y, Mem{Base: pdx})
		ADDQ(U8(4*lanes), pdx)
		ADDQ(U8(4*lanes), pg)
	} else {
		VMULPS(y, x, y) // x·Φ
		VMOVUPS(y, Mem{Base: py})
		ADDQ(U8(4*lanes), py)
	}
	ADDQ(U8(4*lanes), px)
	SUBQ(U8(lanes), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}
