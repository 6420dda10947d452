// Command asmgen generates the SIMD micro-kernels of package prod: the
// assembly in prod_amd64.s and its Go declarations in stubs_amd64.go. Run
// it from this directory (its own module, so that modref does not depend on
// avo):
//
//	go run . -out ../prod_amd64.s -stubs ../stubs_amd64.go -pkg prod
//
// Each kernel continues the 32 chains of a 4×8 block of c (rows ldc values
// apart) with k steps of the packed panels a (k×4: a[4p+i] = A[i,p]) and b
// (k×8: b[8p+j] = B[p,j]). Per step and lane it computes the product
// A[i,p]·B[p,j] with one rounded multiply (VMULPD) and adds it to the
// chain with one rounded add (VADDPD), never a fused multiply-add, so each
// lane does exactly the Go loop's s += float64(a*b): the same bits at any
// vector width.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func main() {
	kernel("AVX512", 8)
	kernel("AVX2", 4)
	Generate()
}

// kernel emits mul4x8<isa>, with vectors of lanes float64 values (8 in a
// ZMM register, 4 in a YMM register).
func kernel(isa string, lanes int) {
	name := "mul4x8" + isa
	TEXT(name, NOSPLIT, "func(k int, a, b, c *float64, ldc int)")
	Doc(fmt.Sprintf("%s continues the 4×8 block of c (rows ldc values apart) with k steps of the packed panels a (k×4) and b (k×8): c[i][j] += float64(a[4p+i]*b[8p+j]) in order of p, a rounded %s multiply and a rounded add per step.", name, isa))
	vec := func() reg.VecVirtual { return YMM() }
	if lanes == 8 {
		vec = func() reg.VecVirtual { return ZMM() }
	}
	nv := 8 / lanes
	k := Load(Param("k"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(3), ldc)
	acc := make([][]reg.VecVirtual, 4)
	row := GP64()
	MOVQ(pc, row)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for v := range acc[i] {
			acc[i][v] = vec()
			VMOVUPD(Mem{Base: row, Disp: 8 * lanes * v}, acc[i][v])
		}
		if i < 3 {
			ADDQ(ldc, row)
		}
	}
	bv := make([]reg.VecVirtual, nv)
	for v := range bv {
		bv[v] = vec()
	}
	t, m := vec(), vec()
	TESTQ(k, k)
	JZ(LabelRef("done"))
	Label("loop")
	for v := range bv {
		VMOVUPD(Mem{Base: pb, Disp: 8 * lanes * v}, bv[v])
	}
	for i := 0; i < 4; i++ {
		VBROADCASTSD(Mem{Base: pa, Disp: 8 * i}, t)
		for v := range bv {
			VMULPD(bv[v], t, m)
			VADDPD(m, acc[i][v], acc[i][v])
		}
	}
	ADDQ(U8(32), pa)
	ADDQ(U8(64), pb)
	DECQ(k)
	JNZ(LabelRef("loop"))
	Label("done")
	MOVQ(pc, row)
	for i := range acc {
		for v := range acc[i] {
			VMOVUPD(acc[i][v], Mem{Base: row, Disp: 8 * lanes * v})
		}
		if i < 3 {
			ADDQ(ldc, row)
		}
	}
	VZEROUPPER()
	RET()
}
