package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// absMax emits maxAbsBits<isa>: the largest of the bits of |x[j]|
// (math.Float32bits(x[j]) & 0x7fffffff) over n float32 values, n a
// multiple of the vector's lanes (16 on AVX-512, 8 on AVX2). As unsigned
// integers these bits order finite magnitudes as their values and put +Inf
// above them and every NaN above +Inf; integer operations, so exactly the
// Go loop's result.
func absMax(isa string, lanes int) {
	name := "maxAbsBits" + isa
	TEXT(name, NOSPLIT, "func(x *float32, n int) uint32")
	Doc(fmt.Sprintf("%s returns the largest of math.Float32bits(x[j]) & 0x7fffffff for j < n, %d at a time (n a multiple of %d, at least %d).", name, lanes, lanes, lanes))
	avx512 := lanes == 16
	vec := vectors(avx512)
	px := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	mask, acc, v := vec(), vec(), vec()
	// 0x7fffffff in every lane: all ones shifted right by 1; acc = 0.
	if avx512 {
		VPTERNLOGD(U8(0xff), mask, mask, mask)
		VPSRLD(U8(1), mask, mask)
		VPXORD(acc, acc, acc)
	} else {
		VPCMPEQD(mask, mask, mask)
		VPSRLD(U8(1), mask, mask)
		VPXOR(acc, acc, acc)
	}
	Label("loop")
	if avx512 {
		VPANDD(Mem{Base: px}, mask, v)
	} else {
		VPAND(Mem{Base: px}, mask, v)
	}
	VPMAXUD(v, acc, acc)
	ADDQ(U8(4*lanes), px)
	SUBQ(U8(lanes), n)
	JNZ(LabelRef("loop"))
	// Halve the vector until one value is left.
	y := acc
	if avx512 {
		y = YMM()
		VEXTRACTI64X4(U8(1), acc, y)
		VPMAXUD(acc.AsY(), y, y)
	}
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	VPMAXUD(y.AsX(), x, x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t) // swap the 64-bit halves
	VPMAXUD(t, x, x)
	VPSHUFD(U8(0xb1), x, t) // swap the 32-bit values of each half
	VPMAXUD(t, x, x)
	r := GP32()
	VMOVD(x, r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
