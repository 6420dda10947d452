package elem

import "math"

// logDD returns hi+lo ≈ log(x) for finite x > 0, to about 2^-100 relative
// error: x = 2^k·m, log m = 2·atanh(s) = 2s + 2s³/3 + 2s⁵/5 + … with
// s = (m−1)/(m+1), |s| ≤ 0.172; s and the terms through s⁵ are carried in
// two parts, the rest (below 2^-17 of the total) in one.
func logDD(x float64) (hi, lo float64) {
	const (
		// 2/3 and 2/5 in two parts each (hi rounded to nearest, lo the
		// rest rounded). Go keeps typed constant expressions exact, so
		// they are written out; the tests check them with math/big.
		c3h = 0x1.5555555555555p-1
		c3l = 0x1.5555555555555p-55
		c5h = 0x1.999999999999ap-2
		c5l = -0x1.999999999999ap-56
	)
	k, m := reduceLog(x)
	fk := float64(k)
	f := m - 1 // exact: ½ ≤ m/1 ≤ 2
	// k·ln2 in two parts; fk·ln2Hi is exact.
	hi, lo = fastTwoSum(float64(fk*ln2Hi), float64(fk*ln2Lo))
	if f == 0 {
		return hi, lo
	}
	d := 2 + f
	dlo := (2 - d) + f // d + dlo = 2 + f exactly, since |f| < 2
	sh := f / d
	p, pe := twoProd(sh, d)
	sl := (((f - p) - pe) - float64(sh*dlo)) / d // sh + sl ≈ f/(2+f)
	zh, zl := ddMul(sh, sl, sh, sl)
	s3h, s3l := ddMul(sh, sl, zh, zl)
	s5h, s5l := ddMul(s3h, s3l, zh, zl)
	t3h, t3l := ddMul(s3h, s3l, c3h, c3l)
	t5h, t5l := ddMul(s5h, s5l, c5h, c5l)
	// 2s⁷·(1/7 + s²/9 + …): with s² ≤ 0.0295, terms through s²⁵ leave a
	// truncation error below 2^-64 of the sum.
	var q float64
	for i := 25; i >= 7; i -= 2 {
		q = 1/float64(i) + float64(zh*q)
	}
	rest := float64(float64(2*float64(s5h*zh)) * q)
	s, e := twoSum(hi, 2*sh)
	s, e3 := twoSum(s, t3h)
	s, e5 := twoSum(s, t5h)
	e += e3 + e5 + (lo + (float64(2*sl) + (t3l + (t5l + rest))))
	return fastTwoSum(s, e)
}

// Pow returns x^y.
//
// Special cases follow C99 Annex F (as Go's math.Pow): Pow(x, ±0) = 1 and
// Pow(1, y) = 1 for any y (NaN included); otherwise a NaN argument gives NaN;
// a negative finite x gives NaN unless y is an integer, where the sign
// follows y's parity; ±0 and ±Inf bases and ±Inf exponents give the limits.
//
// For finite x > 0, x^y = e^t with t = y·log x carried in two parts: log x
// from logDD, the product split exactly (twoProd), and e^(th+tl) =
// the low part folded into the exponential's reduced argument (expDD).
func Pow(x, y float64) float64 {
	switch {
	case y == 0 || x == 1:
		return 1
	case x != x || y != y:
		return math.NaN()
	case isInf(y):
		switch ax := math.Abs(x); {
		case ax == 1:
			return 1
		case (ax < 1) == (y > 0):
			return 0
		default:
			return math.Inf(1)
		}
	case x < 0:
		yi, yf := math.Modf(y)
		if yf != 0 {
			return math.NaN()
		}
		r := Pow(-x, y)
		if math.Abs(yi) < 1<<53 && int64(yi)&1 == 1 {
			r = -r
		}
		return r
	case x == 0:
		// x is +0 here (-0 < 0 is false, so it arrives too): the sign
		// of an odd power of -0 is kept.
		odd := false
		if yi, yf := math.Modf(y); yf == 0 && math.Abs(yi) < 1<<53 {
			odd = int64(yi)&1 == 1
		}
		r := 0.0
		if y < 0 {
			r = math.Inf(1)
		}
		if odd && math.Signbit(x) {
			r = -r
		}
		return r
	case isInf(x):
		if y < 0 {
			return 0
		}
		return x
	}
	lh, ll := logDD(x)
	th := float64(y * lh)
	if math.Abs(th) > 800 { // beyond overflow and underflow either way
		return Exp(th)
	}
	th, tl := twoProd(y, lh)
	tl += float64(y * ll)
	return expDD(fastTwoSum(th, tl))
}
