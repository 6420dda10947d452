package elem

import "math"

// ln2Hi + ln2Lo = ln 2 to about 2^-85; ln2Hi has 32 significant bits, so
// k·ln2Hi is exact for |k| < 2^21 (fdlibm e_exp.c and e_log.c).
const (
	ln2Hi = 6.93147180369123816490e-01 // 0x3FE62E42FEE00000
	ln2Lo = 1.90821492927058770002e-10 // 0x3DEA39EF35793C76
)

// Exp returns e^x.
//
// Special cases: Exp(+Inf) = +Inf, Exp(-Inf) = 0, Exp(NaN) = NaN; it
// overflows to +Inf above ln(MaxFloat64) and underflows to 0 below
// ln(2^-1075).
//
// The algorithm is fdlibm's e_exp.c: x = k·ln2 + r with |r| ≤ ln2/2, r
// carried as hi − lo, and e^r = 1 + 2r/(R(r²) − r) where R is fdlibm's
// degree-5 Remez polynomial (coefficients P1…P5 from e_exp.c).
func Exp(x float64) float64 { return expDD(x, 0) }

// expDD returns e^(x+xl) for |xl| ≤ ulp(x), with xl folded into the reduced
// argument so that it costs no extra rounding.
func expDD(x, xl float64) float64 {
	const (
		log2e     = 1.44269504088896338700e+00
		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
		nearZero  = 1.0 / (1 << 28)
	)
	switch {
	case x != x:
		return x
	case x > overflow:
		return math.Inf(1)
	case x < underflow:
		return 0
	case -nearZero < x && x < nearZero:
		return 1 + (x + xl)
	}
	var k int
	if x < 0 {
		k = int(float64(log2e*x) - 0.5)
	} else {
		k = int(float64(log2e*x) + 0.5)
	}
	hi := x - float64(float64(k)*ln2Hi)
	lo := float64(float64(k)*ln2Lo) - xl
	return expReduced(hi, lo, k)
}

// expReduced returns e^(hi−lo)·2^k for |hi−lo| ≤ about ln2/2.
func expReduced(hi, lo float64, k int) float64 {
	const (
		p1 = 1.66666666666666657415e-01  // 0x3FC555555555553E
		p2 = -2.77777777770155933842e-03 // 0xBF66C16C16BEBD93
		p3 = 6.61375632143793436117e-05  // 0x3F11566AAF25DE2C
		p4 = -1.65339022054652515390e-06 // 0xBEBBBD41C5D26BF1
		p5 = 4.13813679705723846039e-08  // 0x3E66376972BEA4D0
	)
	r := hi - lo
	t := float64(r * r)
	poly := p1 + float64(t*(p2+float64(t*(p3+float64(t*(p4+float64(t*p5)))))))
	c := r - float64(t*poly)
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return scale(y, k)
}

// isInf reports whether x is ±Inf.
func isInf(x float64) bool { return x > math.MaxFloat64 || x < -math.MaxFloat64 }
