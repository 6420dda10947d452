package autograd

import "math"

// Constants of exp: log₂e, and ln 2 split into a head with few enough bits
// that k·ln2Hi is exact for every |k| < 2¹¹, and the rest.
const (
	log2e = 1.4426950408889634
	ln2Hi = 6.93147180369123816490e-01 // 0x3fe62e42fee00000: 32 significant bits
	ln2Lo = 1.90821492927058770002e-10
)

// exp returns eˣ to within about 2e-10 relative error: the exponentials of
// softmax, attention and cross-entropy, whose results are rounded to
// float32 (relative spacing 6e-8 to 1.2e-7) or summed in float64 and then
// divided and rounded to float32, so that an error 300 times below float32's
// rounding moves a result by at most one float32 rounding, rarely. It is
// several times faster than math.Exp, which these loops spent most of their
// time in (docs/performance.md), and gives the same bits on every
// architecture (no FMA fusion, see the package documentation).
//
// x = k·ln 2 + r with k = round(x·log₂e) and |r| ≤ ln2/2 (Cody and Waite's
// reduction in two parts), eʳ by its Taylor polynomial of degree 10 in
// Horner form (truncation under r¹¹/11! < 2e-13), and 2ᵏ put into the
// exponent bits, in two factors where the result is subnormal.
func exp(x float64) float64 {
	switch {
	case x != x || x == math.Inf(1):
		return x
	case x > 709.782712893384:
		return math.Inf(1)
	case x < -745.1332191019412:
		return 0
	}
	// Adding and subtracting 1.5·2⁵² rounds x·log₂e to the nearest integer.
	k := (float64(x*log2e) + 0x1.8p52) - 0x1.8p52
	r := (x - float64(k*ln2Hi)) - float64(k*ln2Lo)
	// Taylor coefficients 1/n! of degree 8, by Estrin's scheme: the
	// products of independent pairs run side by side.
	r2 := float64(r * r)
	r4 := float64(r2 * r2)
	p01 := float64(r*1) + 1
	p23 := float64(r*(1.0/6)) + 0.5
	p45 := float64(r*(1.0/120)) + 1.0/24
	p67 := float64(r*(1.0/5040)) + 1.0/720
	p03 := float64(r2*p23) + p01
	p47 := float64(r2*p67) + p45
	p48 := float64(r4*(1.0/40320)) + p47
	p := float64(r4*p48) + p03
	ki := int64(k)
	if ki < -1021 {
		return p * math.Float64frombits(uint64(ki+1023+600)<<52) * 0x1p-600
	}
	if ki > 1023 {
		return p * math.Float64frombits(uint64(ki+1023-1)<<52) * 2
	}
	return p * math.Float64frombits(uint64(ki+1023)<<52)
}
