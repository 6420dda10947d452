package elem

import "math"

// twoSum returns s = a+b rounded and e with s+e = a+b exactly (Knuth).
func twoSum(a, b float64) (s, e float64) {
	s = a + b
	bb := s - a
	e = (a - (s - bb)) + (b - bb)
	return s, e
}

// fastTwoSum is twoSum for |a| ≥ |b| (or a = 0) (Dekker).
func fastTwoSum(a, b float64) (s, e float64) {
	s = a + b
	e = b - (s - a)
	return s, e
}

// split returns hi+lo = a with hi holding the upper 26 bits of a's
// significand (Veltkamp), so that products of halves are exact.
func split(a float64) (hi, lo float64) {
	const splitter = 1<<27 + 1
	c := float64(splitter * a)
	hi = c - (c - a)
	return hi, a - hi
}

// twoProd returns p = a·b rounded and e with p+e = a·b exactly (Dekker),
// without a fused multiply-add. It requires |a|, |b| < 2^995 and a·b not
// subnormal.
func twoProd(a, b float64) (p, e float64) {
	p = float64(a * b)
	ah, al := split(a)
	bh, bl := split(b)
	e = ((float64(ah*bh) - p) + float64(ah*bl) + float64(al*bh)) + float64(al*bl)
	return p, e
}

// ddMul returns (ah+al)·(bh+bl) in two parts, to about 2^-104 relative.
func ddMul(ah, al, bh, bl float64) (hi, lo float64) {
	p, e := twoProd(ah, bh)
	e += float64(ah*bl) + float64(al*bh)
	return fastTwoSum(p, e)
}

// scale returns y·2^k, rounding once if the result is subnormal.
func scale(y float64, k int) float64 {
	pow2 := func(k int) float64 { return math.Float64frombits(uint64(k+1023) << 52) }
	switch {
	case k > 1023:
		return float64(y*pow2(1023)) * pow2(k-1023)
	case k < -1022:
		return float64(y*pow2(k+1000)) * pow2(-1000)
	}
	return y * pow2(k)
}
