package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// scaleShifted emits scaleShifted<isa>: grad[j] = float32(float64(y[j]) ·
// (float64(grad[j]) − s)) for j < n, n a multiple of the float64 lanes (8 on
// AVX-512, 4 on AVX2): the gradient of a row of softmax (attention's dS)
// from its probabilities y, the row's dP in grad and its Σ dP·y in s. The
// widening, the subtraction, the multiplication and the rounding to float32
// are each correctly rounded, so every lane has the Go loop's bits.
func scaleShifted(isa string, lanes int) {
	name := "scaleShifted" + isa
	TEXT(name, NOSPLIT, "func(grad *float32, y *float32, n int, s float64)")
	Doc(fmt.Sprintf("%s sets grad[j] = float32(float64(y[j]) * (float64(grad[j]) - s)) for j < n, %d at a time (n a multiple of %d).", name, lanes, lanes))
	avx512 := lanes == 8
	vec := vectors(avx512)
	half := func() reg.VecVirtual {
		if avx512 {
			return YMM()
		}
		return XMM()
	}
	pg := Load(Param("grad"), GP64())
	py := Load(Param("y"), GP64())
	n := Load(Param("n"), GP64())
	sx := XMM()
	Load(Param("s"), sx)
	sv, gv, yv := vec(), vec(), vec()
	VBROADCASTSD(sx, sv)
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VCVTPS2PD(Mem{Base: pg}, gv)
	VCVTPS2PD(Mem{Base: py}, yv)
	VSUBPD(sv, gv, gv) // g − s
	VMULPD(gv, yv, gv) // y·(g − s)
	h := half()
	if avx512 {
		VCVTPD2PS(gv, h)
	} else {
		VCVTPD2PSY(gv, h)
	}
	VMOVUPS(h, Mem{Base: pg})
	ADDQ(U8(4*lanes), pg)
	ADDQ(U8(4*lanes), py)
	SUBQ(U8(lanes), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}
