package elem

import (
	"math"
	"math/big"
	"sync"
)

// π/2 = pio2a + pio2b + pio2c + pio2d: the first three have 33 significant
// bits, so n·pio2x is exact for n < 2^20, and pio2d is the rest rounded to 53
// bits (the values of fdlibm's pio2_1, pio2_2, pio2_3 and pio2_3t; the tests
// recompute them from π).
const (
	pio2a = 0x1.921fb544p+00
	pio2b = 0x1.0b4611a6p-34
	pio2c = 0x1.3198a2ep-69
	pio2d = 0x1.b839a252049c1p-104
	// cwLimit bounds the arguments reduced with the constants above;
	// larger ones are reduced exactly with math/big.
	cwLimit = 0x1p19 * math.Pi
)

// reduce returns n and y = yh+yl with x = n·π/2 + y and |y| ≤ about π/4, for
// finite x ≥ 0. Below cwLimit the products n·pio2a, n·pio2b and n·pio2c are
// exact and the differences are carried in two parts (twoSum), so y is
// accurate to about 2^-104 relative even when x is close to a multiple of
// π/2; above it the reduction is done with math/big and π to 1350 bits.
func reduce(x float64) (n int, yh, yl float64) {
	if x <= math.Pi/4 {
		return 0, x, 0
	}
	if x >= cwLimit {
		return reduceBig(x)
	}
	const twoOverPi = 6.36619772367581382433e-01
	n = int(float64(x*twoOverPi) + 0.5)
	fn := float64(n)
	hi := x - float64(fn*pio2a) // exact: x and n·pio2a are within a factor 2
	var lo, e float64
	hi, e = twoSum(hi, -float64(fn*pio2b))
	lo += e
	hi, e = twoSum(hi, -float64(fn*pio2c))
	lo += e
	lo -= float64(fn * pio2d)
	yh, yl = fastTwoSum(hi, lo)
	return n, yh, yl
}

var (
	bigPiOnce sync.Once
	bigPi     *big.Float // π to bigPiPrec bits
)

// bigPiPrec covers doubles up to 2^1024 with 2^-200 of π/2 to spare.
const bigPiPrec = 1350

// machinPi returns π to prec bits, from Machin's formula π = 16·atan(1/5) −
// 4·atan(1/239).
func machinPi(prec uint) *big.Float {
	atanInv := func(n int64) *big.Float {
		sum := new(big.Float).SetPrec(prec)
		pow := new(big.Float).SetPrec(prec).Quo(big.NewFloat(1), big.NewFloat(float64(n)))
		n2 := new(big.Float).SetPrec(prec).SetInt64(n * n)
		term := new(big.Float).SetPrec(prec)
		for k := int64(0); pow.Sign() != 0 && pow.MantExp(nil) > -int(prec)-8; k++ {
			term.Quo(pow, new(big.Float).SetInt64(2*k+1))
			if k%2 == 0 {
				sum.Add(sum, term)
			} else {
				sum.Sub(sum, term)
			}
			pow.Quo(pow, n2)
		}
		return sum
	}
	pi := new(big.Float).SetPrec(prec).Mul(big.NewFloat(16), atanInv(5))
	return pi.Sub(pi, new(big.Float).SetPrec(prec).Mul(big.NewFloat(4), atanInv(239)))
}

// reduceBig is reduce for large x, with π from machinPi.
func reduceBig(x float64) (n int, yh, yl float64) {
	bigPiOnce.Do(func() { bigPi = machinPi(bigPiPrec) })
	halfPi := new(big.Float).SetPrec(bigPiPrec).Quo(bigPi, big.NewFloat(2))
	q := new(big.Float).SetPrec(bigPiPrec).SetFloat64(x)
	q.Quo(q, halfPi)
	// Round q to the nearest integer k; only k mod 4 matters.
	q.Add(q, big.NewFloat(0.5))
	k, _ := q.Int(nil)
	q.SetInt(k)
	y := new(big.Float).SetPrec(bigPiPrec).Mul(q, halfPi)
	y.Sub(new(big.Float).SetPrec(bigPiPrec).SetFloat64(x), y)
	yh, _ = y.Float64()
	y.Sub(y, new(big.Float).SetFloat64(yh))
	yl, _ = y.Float64()
	return int(k.Bit(0) | k.Bit(1)<<1), yh, yl
}

// Taylor coefficients (−1)^k/(2k+1)! and (−1)^k/(2k)! as exact constant
// expressions, rounded once. On |y| ≤ π/4 the series stop below 2^-80 of
// the result.
const (
	s3, s5, s7, s9, s11 = -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800
	s13, s15, s17, s19  = 1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000, -1.0 / 121645100408832000
	s21, s23            = 1.0 / 51090942171709440000, -1.0 / 25852016738884976640000
	c4, c6, c8, c10     = 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800
	c12, c14, c16, c18  = 1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000, -1.0 / 6402373705728000
	c20, c22, c24       = 1.0 / 2432902008176640000, -1.0 / 1124000727777607680000, 1.0 / 620448401733239439360000
)

// sinKernel returns sin(y+yl) for |y| ≤ about π/4, |yl| ≤ ulp(y):
// y + y³·P(y²) + yl·(1 − y²/2).
func sinKernel(y, yl float64) float64 {
	z := float64(y * y)
	p := s21 + float64(z*s23)
	for _, c := range [...]float64{s19, s17, s15, s13, s11, s9, s7, s5, s3} {
		p = c + float64(z*p)
	}
	return y + (float64(float64(z*y)*p) + float64(yl*(1-float64(0.5*z))))
}

// cosKernel returns cos(y+yl) for |y| ≤ about π/4, |yl| ≤ ulp(y):
// w + ((1−w−y²/2) + (y⁴·Q(y²) − y·yl)) with w = 1 − y²/2 rounded, so that
// the rounding error of w is carried (as fdlibm's k_cos.c does).
func cosKernel(y, yl float64) float64 {
	z := float64(y * y)
	q := c22 + float64(z*c24)
	for _, c := range [...]float64{c20, c18, c16, c14, c12, c10, c8, c6, c4} {
		q = c + float64(z*q)
	}
	hz := float64(0.5 * z)
	w := 1 - hz
	return w + (((1 - w) - hz) + (float64(float64(z*z)*q) - float64(y*yl)))
}

// Sin returns the sine of x (radians).
//
// Special cases: Sin(±0) = ±0, Sin(±Inf) = NaN, Sin(NaN) = NaN.
//
// x = n·π/2 + y is reduced with a four-part π/2 (exactly with math/big
// beyond 2^19·π), and sin or cos of y comes from its Taylor series.
func Sin(x float64) float64 {
	if x == 0 || x != x {
		return x
	}
	if isInf(x) {
		return math.NaN()
	}
	sign := 1.0
	if x < 0 {
		x, sign = -x, -1
	}
	n, y, yl := reduce(x)
	var r float64
	switch n & 3 {
	case 0:
		r = sinKernel(y, yl)
	case 1:
		r = cosKernel(y, yl)
	case 2:
		r = -sinKernel(y, yl)
	default:
		r = -cosKernel(y, yl)
	}
	return sign * r
}

// Cos returns the cosine of x (radians).
//
// Special cases: Cos(±Inf) = NaN, Cos(NaN) = NaN.
//
// The reduction is Sin's.
func Cos(x float64) float64 {
	if x != x || isInf(x) {
		return math.NaN()
	}
	n, y, yl := reduce(math.Abs(x))
	switch n & 3 {
	case 0:
		return cosKernel(y, yl)
	case 1:
		return -sinKernel(y, yl)
	case 2:
		return -cosKernel(y, yl)
	}
	return sinKernel(y, yl)
}
