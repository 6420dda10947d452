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
	for mr := 1; mr <= mrAVX512; mr++ {
		for nv := 1; nv <= 2; nv++ {
			kernel("AVX512", mr, nv, 16)
		}
	}
	for mr := 1; mr <= mrAVX2; mr++ {
		for nv := 1; nv <= 2; nv++ {
			kernel("AVX2", mr, nv, 8)
		}
	}
	Generate()
}

// unroll is how many steps of p the main loop takes per iteration.
const unroll = 4

// kernel emits gemm<isa>_<mr>x<w> for w = nv·lanes.
func kernel(isa string, mr, nv, lanes int) {
	w := nv * lanes
	name := fmt.Sprintf("gemm%s_%dx%d", isa, mr, w)
	TEXT(name, NOSPLIT, "func(k int, a, b, c *float32, ldc int, load bool)")
	Doc(fmt.Sprintf("%s sets the %d×%d block of c (rows ldc floats apart) to its value (load) or 0, plus the product of the packed panels a (k×%d) and b (k×%d), with %s FMAs in order of k.", name, mr, w, mr, w, isa))
	vec := func() reg.VecVirtual {
		if lanes == 16 {
			return ZMM()
		}
		return YMM()
	}
	k := Load(Param("k"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
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
			am := Mem{Base: pa, Disp: 4 * (u*mr + i)}
			if lanes == 16 {
				for v := range bv {
					VFMADD231PS_BCST(am, bv[v], acc[i][v])
				}
				continue
			}
			VBROADCASTSS(am, bc)
			for v := range bv {
				VFMADD231PS(bc, bv[v], acc[i][v])
			}
		}
	}
	Label("loop")
	CMPQ(k, U8(unroll))
	JL(LabelRef("tail"))
	for u := range unroll {
		step(u)
	}
	ADDQ(U32(4*unroll*mr), pa)
	ADDQ(U32(4*unroll*w), pb)
	SUBQ(U8(unroll), k)
	JMP(LabelRef("loop"))
	Label("tail")
	TESTQ(k, k)
	JZ(LabelRef("store"))
	step(0)
	ADDQ(U32(4*mr), pa)
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
