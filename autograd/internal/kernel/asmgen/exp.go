package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Indices into the constant table the exponentials read (kernel.expTable,
// each entry four copies of one 64-bit value, 32 bytes).
const (
	cLog2e = iota
	cShift
	cLn2Hi
	cLn2Lo
	cOne
	c6 // 1/6
	cHalf
	c120 // 1/120
	c24  // 1/24
	c5040
	c720
	c40320
	cKLo     // −1021: below it 2ᵏ is subnormal
	cKHi     // 1023: above it 2ᵏ overflows
	cTwoM600 // 2⁻⁶⁰⁰
	cTwo
	cMax // the largest x whose exponential is finite
	cMin // the smallest x whose exponential is not 0
	cInf
	cI1023 // int64 1023
	cI600  // int64 600
	cI1    // int64 1
)

// Comparison predicates of VCMPPD.
const (
	cmpLT    = 0x01 // less than, ordered
	cmpUnord = 0x03 // either is NaN
	cmpNLE   = 0x06 // not less than or equal: greater or NaN
	cmpNGE   = 0x09 // not greater than or equal: less or NaN
	cmpGT    = 0x0e // greater than, ordered
)

// exp emits expShifted<isa>, e[j] = kernel.Exp(float64(x[j]) − m) on
// vectors of float64 lanes (8 for AVX512, 4 for AVX2): Exp's
// multiplications, additions and subtractions in Exp's order, never fused,
// so that every lane gets Exp's bits. A vector whose every k = round(x·log₂e) lies in [−1021, 1023]
// (so no NaN, overflow, underflow or subnormal result) takes the short
// path, p·2ᵏ; any other goes through the long one, which scales by two
// factors where Exp does and then sets the lanes of Exp's special cases.
//
// With sum, it emits expShiftedSum<isa>, which also returns the sum of the
// exponentials added one at a time in order of j, starting from +0: the
// additions of the Go loop, which the exponentials of later vectors
// overlap.
func exp(isa string, lanes int, sum bool) {
	name := "expShifted" + isa
	if sum {
		name = "expShiftedSum" + isa
		TEXT(name, NOSPLIT, "func(e *float64, x *float32, n int, m float64, c *[4]uint64) float64")
		Doc(fmt.Sprintf("%s sets e[j] = Exp(float64(x[j]) - m) for j < n, %d at a time (n a multiple of %d), with Exp's constants from c (expTable), and returns ((0 + e[0]) + e[1]) + … + e[n-1].", name, lanes, lanes))
	} else {
		TEXT(name, NOSPLIT, "func(e *float64, x *float32, n int, m float64, c *[4]uint64)")
		Doc(fmt.Sprintf("%s sets e[j] = Exp(float64(x[j]) - m) for j < n, %d at a time (n a multiple of %d), with Exp's constants from c (expTable).", name, lanes, lanes))
	}
	avx512 := lanes == 8
	vec := vectors(avx512)
	pe := Load(Param("e"), GP64())
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	pc := Load(Param("c"), GP64())
	mv := vec()
	mx := XMM()
	Load(Param("m"), mx)
	VBROADCASTSD(mx, mv)
	cm := func(i int) Mem { return Mem{Base: pc, Disp: 32 * i} }
	// Operations with a constant operand: a broadcast element on AVX-512,
	// a whole vector from the table on AVX2.
	mulC := func(i int, a, dst reg.VecVirtual) {
		if avx512 {
			VMULPD_BCST(cm(i), a, dst)
		} else {
			VMULPD(cm(i), a, dst)
		}
	}
	addC := func(i int, a, dst reg.VecVirtual) {
		if avx512 {
			VADDPD_BCST(cm(i), a, dst)
		} else {
			VADDPD(cm(i), a, dst)
		}
	}
	subC := func(i int, a, dst reg.VecVirtual) { // dst = a − c
		if avx512 {
			VSUBPD_BCST(cm(i), a, dst)
		} else {
			VSUBPD(cm(i), a, dst)
		}
	}
	x, t, k, r, tmp := vec(), vec(), vec(), vec(), vec()
	r2, r4, p01, p23, p45, p67 := vec(), vec(), vec(), vec(), vec(), vec()
	s, res := vec(), vec()
	var acc reg.VecVirtual
	if sum {
		acc = XMM()
		VXORPD(acc, acc, acc)
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VCVTPS2PD(Mem{Base: px}, x) // exact, as float64(x[j])
	VSUBPD(mv, x, x)
	// k = (x·log₂e + 1.5·2⁵²) − 1.5·2⁵²; t keeps k + 1.5·2⁵², whose low
	// bits are k as an integer.
	mulC(cLog2e, x, t)
	addC(cShift, t, t)
	subC(cShift, t, k)
	// r = (x − k·ln2Hi) − k·ln2Lo
	mulC(cLn2Hi, k, tmp)
	VSUBPD(tmp, x, r)
	mulC(cLn2Lo, k, tmp)
	VSUBPD(tmp, r, r)
	// Estrin's scheme, as in Exp.
	VMULPD(r, r, r2)
	VMULPD(r2, r2, r4)
	addC(cOne, r, p01) // r·1 + 1: r·1 is r
	mulC(c6, r, p23)
	addC(cHalf, p23, p23)
	mulC(c120, r, p45)
	addC(c24, p45, p45)
	mulC(c5040, r, p67)
	addC(c720, p67, p67)
	VMULPD(p23, r2, p23)
	VADDPD(p01, p23, p23) // p03
	VMULPD(p67, r2, p67)
	VADDPD(p45, p67, p67) // p47
	mulC(c40320, r4, tmp)
	VADDPD(p67, tmp, tmp) // p48
	VMULPD(tmp, r4, tmp)
	VADDPD(p23, tmp, p01) // p
	p := p01
	// The short path unless some k is below −1021, above 1023 or NaN.
	if avx512 {
		klo, khi := K(), K()
		VCMPPD_BCST(U8(cmpNGE), cm(cKLo), k, klo)
		VCMPPD_BCST(U8(cmpNLE), cm(cKHi), k, khi)
		KORTESTW(klo, khi)
		JNZ(LabelRef("long"))
	} else {
		m1, m2 := vec(), vec()
		VCMPPD(U8(cmpNGE), cm(cKLo), k, m1)
		VCMPPD(U8(cmpNLE), cm(cKHi), k, m2)
		VORPD(m1, m2, m1)
		g := GP32()
		VMOVMSKPD(m1, g)
		TESTL(g, g)
		JNZ(LabelRef("long"))
	}
	// 2ᵏ: k + 1023 shifted into the exponent bits (the shift drops the
	// bits of 1.5·2⁵² above k).
	if avx512 {
		VPADDQ_BCST(cm(cI1023), t, s)
	} else {
		VPADDQ(cm(cI1023), t, s)
	}
	VPSLLQ(U8(52), s, s)
	VMULPD(s, p, res)

	Label("store")
	VMOVUPD(res, Mem{Base: pe})
	if sum {
		// acc + e[j] (acc first, as Go's sum += e[j] adds), from the
		// values just stored.
		for i := range lanes {
			VADDSD(Mem{Base: pe, Disp: 8 * i}, acc, acc)
		}
	}
	ADDQ(U8(8*lanes), pe)
	ADDQ(U8(4*lanes), px)
	SUBQ(U8(lanes), n)
	JMP(LabelRef("loop"))

	// The long path: Exp's three scalings of p, then its special cases
	// (NaN and +Inf give x, beyond expMax +Inf, below expMin 0).
	Label("long")
	if avx512 {
		klo, khi, kx := K(), K(), K()
		VCMPPD_BCST(U8(cmpLT), cm(cKLo), k, klo)
		VCMPPD_BCST(U8(cmpGT), cm(cKHi), k, khi)
		VPADDQ_BCST(cm(cI1023), t, s)
		VPADDQ_BCST(cm(cI600), s, klo, s)
		VPSUBQ_BCST(cm(cI1), s, khi, s)
		VPSLLQ(U8(52), s, s)
		VMULPD(s, p, res)
		VMULPD_BCST(cm(cTwoM600), res, klo, res)
		VMULPD_BCST(cm(cTwo), res, khi, res)
		VCMPPD_BCST(U8(cmpGT), cm(cMax), x, kx)
		VBROADCASTSD(cm(cInf), kx, res)
		VCMPPD_BCST(U8(cmpLT), cm(cMin), x, kx)
		VPXORQ(res, res, kx, res)
		VCMPPD(U8(cmpUnord), x, x, kx)
		VMOVAPD(x, kx, res)
	} else {
		mlo, mhi, f := vec(), vec(), vec()
		VCMPPD(U8(cmpLT), cm(cKLo), k, mlo)
		VCMPPD(U8(cmpGT), cm(cKHi), k, mhi)
		// k + 1023, + 600 where k < −1021, − 1 (all ones) where k > 1023.
		VPADDQ(cm(cI1023), t, s)
		VPAND(cm(cI600), mlo, f)
		VPADDQ(f, s, s)
		VPADDQ(mhi, s, s)
		VPSLLQ(U8(52), s, s)
		VMULPD(s, p, res)
		// The second factor: 2⁻⁶⁰⁰, 2, or 1 (leaving p·2ᵏ as it is).
		VMOVUPD(cm(cOne), f)
		VBLENDVPD(mlo, cm(cTwoM600), f, f)
		VBLENDVPD(mhi, cm(cTwo), f, f)
		VMULPD(f, res, res)
		VCMPPD(U8(cmpGT), cm(cMax), x, f)
		VBLENDVPD(f, cm(cInf), res, res)
		VCMPPD(U8(cmpLT), cm(cMin), x, f)
		VANDNPD(res, f, res)
		VCMPPD(U8(cmpUnord), x, x, f)
		VBLENDVPD(f, x, res, res)
	}
	JMP(LabelRef("store"))

	Label("done")
	if sum {
		Store(acc, ReturnIndex(0))
	}
	VZEROUPPER()
	RET()
}

// div emits divToFloat32<isa>: dst[j] = float32(e[j] / d), lanes at a time.
// A division and a conversion are each correctly rounded (to nearest,
// Go's rounding) at any width, so the lanes give the bits of the Go loop.
func div(isa string, lanes int) {
	name := "divToFloat32" + isa
	TEXT(name, NOSPLIT, "func(dst *float32, e *float64, n int, d float64)")
	Doc(fmt.Sprintf("%s sets dst[j] = float32(e[j] / d) for j < n, %d at a time (n a multiple of %d).", name, lanes, lanes))
	avx512 := lanes == 8
	vec := vectors(avx512)
	pd := Load(Param("dst"), GP64())
	pe := Load(Param("e"), GP64())
	n := Load(Param("n"), GP64())
	dx := XMM()
	Load(Param("d"), dx)
	dv, q := vec(), vec()
	VBROADCASTSD(dx, dv)
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VMOVUPD(Mem{Base: pe}, q)
	VDIVPD(dv, q, q)
	if avx512 {
		h := YMM()
		VCVTPD2PS(q, h)
		VMOVUPS(h, Mem{Base: pd})
	} else {
		h := XMM()
		VCVTPD2PSY(q, h)
		VMOVUPS(h, Mem{Base: pd})
	}
	ADDQ(U8(8*lanes), pe)
	ADDQ(U8(4*lanes), pd)
	SUBQ(U8(lanes), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// maxf32 emits maxFloat32<isa>: the largest of n float32 values (n a multiple
// of 2·lanes float64 lanes, one vector of float32), NaNs left out, −Inf if
// there are none. Each lane keeps max(x, lane) with x first, which gives
// the lane when x is NaN (and when both are zeros, the lane's zero: the
// sign of a zero maximum is the caller's to settle).
func maxf32(isa string, lanes int) {
	name := "maxFloat32" + isa
	TEXT(name, NOSPLIT, "func(x *float32, n int) float32")
	Doc(fmt.Sprintf("%s returns the largest of x[j] for j < n, %d at a time (n a multiple of %d): −Inf if all are NaN or −Inf; a zero maximum has either sign.", name, 2*lanes, 2*lanes))
	avx512 := lanes == 8
	vec := vectors(avx512)
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	acc, v := vec(), vec()
	// −Inf in every lane: all ones shifted left by 23 is 0xff800000.
	if avx512 {
		VPTERNLOGD(U8(0xff), acc, acc, acc)
		VPSLLD(U8(23), acc, acc)
	} else {
		VPCMPEQD(acc, acc, acc)
		VPSLLD(U8(23), acc, acc)
	}
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VMOVUPS(Mem{Base: px}, v)
	VMAXPS(acc, v, acc) // acc = max(v, acc): acc where v is NaN
	ADDQ(U8(8*lanes), px)
	SUBQ(U8(2*lanes), n)
	JMP(LabelRef("loop"))
	Label("done")
	// Halve the vector until one value is left (no lane holds a NaN).
	y := acc
	if avx512 {
		y = YMM()
		VEXTRACTF64X4(U8(1), acc, y)
		VMAXPS(acc.AsY(), y, y)
	}
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	VMAXPS(y.AsX(), x, x)
	t := XMM()
	VMOVHLPS(x, x, t)
	VMAXPS(t, x, x)
	VMOVSHDUP(x, t)
	VMAXSS(t, x, x)
	Store(x, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
