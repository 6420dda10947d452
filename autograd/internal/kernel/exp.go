package kernel

import "math"

// Constants of Exp: log₂e, and ln 2 split into a head with few enough bits
// that k·ln2Hi is exact for every |k| < 2¹¹, and the rest.
const (
	log2e = 1.4426950408889634
	ln2Hi = 6.93147180369123816490e-01 // 0x3fe62e42fee00000: 32 significant bits
	ln2Lo = 1.90821492927058770002e-10
	// expShift is 1.5·2⁵²: adding and subtracting it rounds a float64 of
	// magnitude below 2⁵¹ to the nearest integer.
	expShift = 0x1.8p52
	// expMax and expMin are the ends of the range whose exponential is
	// finite and not rounded to 0.
	expMax = 709.782712893384
	expMin = -745.1332191019412
)

// Exp returns eˣ to within about 2e-10 relative error: the exponentials of
// softmax, attention and cross-entropy, whose results are rounded to
// float32 (relative spacing 6e-8 to 1.2e-7) or summed in float64 and then
// divided and rounded to float32, so that an error 300 times below float32's
// rounding moves a result by at most one float32 rounding, rarely. It is
// several times faster than math.Exp, and gives the same bits on every
// architecture (no FMA fusion, see the package documentation of autograd)
// and on every path of ExpShifted.
//
// x = k·ln 2 + r with k = round(x·log₂e) and |r| ≤ ln2/2 (Cody and Waite's
// reduction in two parts), eʳ by its Taylor polynomial of degree 8 by
// Estrin's scheme (truncation under r⁹/9! < 2e-10), and 2ᵏ put into the
// exponent bits, in two factors where the result is subnormal (k < −1021)
// or 2ᵏ itself overflows (k = 1024).
func Exp(x float64) float64 {
	switch {
	case x != x || x == math.Inf(1):
		return x
	case x > expMax:
		return math.Inf(1)
	case x < expMin:
		return 0
	}
	k := (float64(x*log2e) + expShift) - expShift
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
		return float64(p*math.Float64frombits(uint64(ki+1023-1)<<52)) * 2
	}
	return p * math.Float64frombits(uint64(ki+1023)<<52)
}

// ExpShifted sets e[j] = Exp(float64(x[j]) - m) for every j < len(x): the
// exponentials of a row of softmax, attention or cross-entropy less its
// maximum or log-sum-exp. e must hold at least len(x) values. The SIMD
// paths compute 8 (AVX-512) or 4 (AVX2) exponentials at a time with the
// same operations as Exp, so every path gives Exp's bits (asmgen/exp.go).
func ExpShifted(e []float64, x []float32, m float64) {
	e = e[:len(x)]
	j := 0
	if rk := rowAsm(active); rk != nil && len(x) >= rk.lanes {
		j = len(x) / rk.lanes * rk.lanes
		rk.exp(&e[0], &x[0], j, m, &expTable[0])
	}
	for ; j < len(x); j++ {
		e[j] = Exp(float64(x[j]) - m)
	}
}

// ExpShiftedSum does what ExpShifted does and returns the sum of the
// exponentials, added in order of j from +0 (the sum a Go loop
// sum += e[j] gives, bit for bit). The SIMD paths add each vector's values
// one at a time while the next vectors' exponentials are computed.
func ExpShiftedSum(e []float64, x []float32, m float64) float64 {
	e = e[:len(x)]
	j, sum := 0, 0.0
	if rk := rowAsm(active); rk != nil && len(x) >= rk.lanes {
		j = len(x) / rk.lanes * rk.lanes
		sum = rk.expSum(&e[0], &x[0], j, m, &expTable[0])
	}
	for ; j < len(x); j++ {
		e[j] = Exp(float64(x[j]) - m)
		sum += e[j]
	}
	return sum
}

// Max returns what the loop
//
//	m := math.Inf(-1)
//	for _, v := range x {
//		if float64(v) > m {
//			m = float64(v)
//		}
//	}
//
// returns: the largest value as a float64, NaNs left out, −Inf if there is
// none, and of zeros of both signs the first. The SIMD paths take 16
// (AVX-512) or 8 (AVX2) values at a time; the maximum of non-NaN values is
// one bit pattern unless it is zero, and a zero maximum, whose sign the
// vectors' order does not settle, is found again by the loop.
func Max(x []float32) float64 {
	m, j := math.Inf(-1), 0
	if rk := rowAsm(active); rk != nil && len(x) >= 2*rk.lanes {
		j = len(x) / (2 * rk.lanes) * (2 * rk.lanes)
		m = float64(rk.max(&x[0], j))
		if m == 0 {
			m, j = math.Inf(-1), 0
		}
	}
	for _, v := range x[j:] {
		if f := float64(v); f > m {
			m = f
		}
	}
	return m
}

// DivToFloat32 sets dst[j] = float32(e[j] / d) for every j < len(dst): a
// row of probabilities from its exponentials and their sum. e must hold at
// least len(dst) values. The SIMD paths divide 8 or 4 at a time, with the
// bits of the Go loop (each division and rounding to float32 is correctly
// rounded at any width).
func DivToFloat32(dst []float32, e []float64, d float64) {
	e = e[:len(dst)]
	j := 0
	if rk := rowAsm(active); rk != nil && len(dst) >= rk.lanes {
		j = len(dst) / rk.lanes * rk.lanes
		rk.div(&dst[0], &e[0], j, d)
	}
	for ; j < len(dst); j++ {
		dst[j] = float32(e[j] / d)
	}
}

// rowKernels are a SIMD path's generated kernels of rows (asmgen/exp.go).
type rowKernels struct {
	exp    expFunc
	expSum func(e *float64, x *float32, n int, m float64, c *[4]uint64) float64
	div    divFunc
	// max takes n float32 values, n a multiple of 2·lanes (one vector).
	max func(x *float32, n int) float32
	// lanes is the count of float64 values in a vector: n of exp, expSum
	// and div is a multiple of it.
	lanes int
}

// divFunc is the signature of the generated divisions (asmgen/exp.go):
// dst[j] = float32(e[j] / d) for j < n, n a multiple of the vector width.
type divFunc func(dst *float32, e *float64, n int, d float64)

// expFunc is the signature of the generated exponentials (asmgen/exp.go):
// e[j] = Exp(float64(x[j]) - m) for j < n, n a multiple of the vector
// width, with Exp's constants read from c (expTable).
type expFunc func(e *float64, x *float32, n int, m float64, c *[4]uint64)

// expTable holds the constants of Exp for the generated code, in the order
// asmgen/exp.go reads them, each four times (an AVX2 vector; the AVX-512
// code broadcasts the first): the float64 constants by their bits, the
// integers 1023, 600 and 1 as int64.
var expTable = [...][4]uint64{
	rep(log2e), rep(expShift), rep(ln2Hi), rep(ln2Lo),
	rep(1), rep(1.0 / 6), rep(0.5), rep(1.0 / 120), rep(1.0 / 24),
	rep(1.0 / 5040), rep(1.0 / 720), rep(1.0 / 40320),
	rep(-1021), rep(1023), rep(0x1p-600), rep(2),
	rep(expMax), rep(expMin), rep(math.Inf(1)),
	{1023, 1023, 1023, 1023}, {600, 600, 600, 600}, {1, 1, 1, 1},
}

// rep returns the bits of v four times.
func rep(v float64) [4]uint64 {
	b := math.Float64bits(v)
	return [4]uint64{b, b, b, b}
}
