package elem

import "math"

// reduceLog returns k and m with x = 2^k·m and √2/2 ≤ m < √2, for finite
// x > 0 (subnormals included).
func reduceLog(x float64) (k int, m float64) {
	if x < 0x1p-1022 {
		x *= 0x1p54
		k = -54
	}
	b := math.Float64bits(x)
	k += int(b>>52) - 1023
	m = math.Float64frombits(b&(1<<52-1) | 1023<<52)
	if m >= math.Sqrt2 {
		m *= 0.5
		k++
	}
	return k, m
}

// Log returns the natural logarithm of x.
//
// Special cases: Log(+Inf) = +Inf, Log(±0) = -Inf, Log(x < 0) = NaN,
// Log(NaN) = NaN.
//
// The algorithm is fdlibm's e_log.c: x = 2^k·(1+f) with √2/2 ≤ 1+f < √2,
// log(1+f) = 2s + s·R(s²) with s = f/(2+f), R fdlibm's degree-7 Remez
// polynomial (coefficients Lg1…Lg7 from e_log.c), and k·ln2 added in two
// parts.
func Log(x float64) float64 {
	const (
		lg1 = 6.666666666666735130e-01 // 0x3FE5555555555593
		lg2 = 3.999999999940941908e-01 // 0x3FD999999997FA04
		lg3 = 2.857142874366239149e-01 // 0x3FD2492494229359
		lg4 = 2.222219843214978396e-01 // 0x3FCC71C51D8E78AF
		lg5 = 1.818357216161805012e-01 // 0x3FC7466496CB03DE
		lg6 = 1.531383769920937332e-01 // 0x3FC39A09D078C69F
		lg7 = 1.479819860511658591e-01 // 0x3FC2F112DF3E5244
	)
	switch {
	case x != x || isInf(x) && x > 0:
		return x
	case x < 0:
		return math.NaN()
	case x == 0:
		return math.Inf(-1)
	}
	k, m := reduceLog(x)
	f := m - 1
	fk := float64(k)
	s := f / (2 + f)
	s2 := float64(s * s)
	s4 := float64(s2 * s2)
	t1 := float64(s2 * (lg1 + float64(s4*(lg3+float64(s4*(lg5+float64(s4*lg7)))))))
	t2 := float64(s4 * (lg2 + float64(s4*(lg4+float64(s4*lg6)))))
	r := t1 + t2
	hfsq := float64(0.5 * float64(f*f))
	return float64(fk*ln2Hi) - ((hfsq - (float64(s*(hfsq+r)) + float64(fk*ln2Lo))) - f)
}

// Log1p returns log(1+x), accurate also when x is near zero.
//
// Special cases: Log1p(+Inf) = +Inf, Log1p(-1) = -Inf, Log1p(x < -1) = NaN,
// Log1p(NaN) = NaN.
//
// u = 1+x is rounded; its rounding error c (u + c = 1 + x exactly) gives
// log(1+x) = log(u) + log(1 + c/u) ≈ log(u) + c/u, with log(u) taken in two
// parts (logDD, see Pow) since it may cancel against c/u.
func Log1p(x float64) float64 {
	switch {
	case x != x || isInf(x) && x > 0:
		return x
	case x < -1:
		return math.NaN()
	case x == -1:
		return math.Inf(-1)
	case -0x1p-54 < x && x < 0x1p-54:
		return x // log(1+x) = x·(1 − x/2 + …) rounds to x
	}
	u, c := twoSum(1, x)
	hi, lo := logDD(u)
	return hi + (lo + c/u)
}
