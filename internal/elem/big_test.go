package elem

import (
	"math"
	"math/big"
	"sync"
)

// The references the tests compare against: each function computed with
// math/big to refPrec bits (π to 1400), from the defining series.

const refPrec = 300

func newF() *big.Float { return new(big.Float).SetPrec(refPrec) }

func bf(x float64) *big.Float { return newF().SetFloat64(x) }

var (
	refOnce   sync.Once
	refPi     *big.Float // 1400 bits
	refLn2    *big.Float
	refSqrtPi *big.Float
)

func refConsts() {
	refOnce.Do(func() {
		refPi = machinPi(1400)
		refLn2 = newF().Mul(big.NewFloat(2), atanhSeries(newF().Quo(bf(1), bf(3))))
		refSqrtPi = newF().Sqrt(newF().Set(refPi))
	})
}

// atanhSeries returns s + s³/3 + s⁵/5 + … for |s| ≤ 1/3.
func atanhSeries(s *big.Float) *big.Float {
	sum, pow, s2 := newF().Set(s), newF().Set(s), newF().Mul(s, s)
	term := newF()
	for k := int64(3); ; k += 2 {
		pow.Mul(pow, s2)
		term.Quo(pow, newF().SetInt64(k))
		if term.Sign() == 0 || term.MantExp(nil) < sum.MantExp(nil)-refPrec-8 {
			return sum
		}
		sum.Add(sum, term)
	}
}

// refExp returns e^x.
func refExp(x *big.Float) *big.Float {
	refConsts()
	q := newF().Quo(x, refLn2)
	q.Add(q, big.NewFloat(0.5))
	if q.Sign() < 0 {
		q.Sub(q, big.NewFloat(1)) // Int truncates toward zero
	}
	kBig, _ := q.Int(nil)
	k := int(kBig.Int64())
	r := newF().Mul(newF().SetInt64(int64(k)), refLn2)
	r.Sub(x, r)
	// e^r = (e^(r/2^16))^(2^16), Taylor series on r/2^16.
	const halvings = 16
	r.SetMantExp(r, -halvings)
	sum, term := bf(1), bf(1)
	for n := int64(1); ; n++ {
		term.Mul(term, r)
		term.Quo(term, newF().SetInt64(n))
		if term.Sign() == 0 || term.MantExp(nil) < -refPrec-8 {
			break
		}
		sum.Add(sum, term)
	}
	for i := 0; i < halvings; i++ {
		sum.Mul(sum, sum)
	}
	return sum.SetMantExp(sum, k)
}

// refLog returns log x for x > 0.
func refLog(x *big.Float) *big.Float {
	refConsts()
	m := newF()
	e := x.MantExp(m) // x = m·2^e, ½ ≤ m < 1
	if m.Cmp(big.NewFloat(math.Sqrt2/2)) < 0 {
		m.SetMantExp(m, 1)
		e--
	}
	s := newF().Quo(newF().Sub(m, bf(1)), newF().Add(m, bf(1)))
	l := newF().Mul(big.NewFloat(2), atanhSeries(s))
	return l.Add(l, newF().Mul(newF().SetInt64(int64(e)), refLn2))
}

// refLog1p returns log(1+x) for x > −1.
func refLog1p(x float64) *big.Float {
	if math.Abs(x) < 0.25 {
		// log(1+x) = 2·atanh(x/(2+x)), accurate for tiny x too.
		s := newF().Quo(bf(x), newF().Add(bf(2), bf(x)))
		return newF().Mul(big.NewFloat(2), atanhSeries(s))
	}
	u := new(big.Float).SetPrec(2200).SetFloat64(x) // 1+x exactly
	u.Add(u, big.NewFloat(1))
	return refLog(newF().Set(u))
}

// refSinCos returns sin x and cos x.
func refSinCos(x float64) (sin, cos *big.Float) {
	refConsts()
	const p = 1400
	halfPi := new(big.Float).SetPrec(p).Quo(refPi, big.NewFloat(2))
	q := new(big.Float).SetPrec(p).Quo(new(big.Float).SetPrec(p).SetFloat64(math.Abs(x)), halfPi)
	q.Add(q, big.NewFloat(0.5))
	n, _ := q.Int(nil)
	y := new(big.Float).SetPrec(p).Mul(new(big.Float).SetPrec(p).SetInt(n), halfPi)
	y.Sub(new(big.Float).SetPrec(p).SetFloat64(math.Abs(x)), y)
	r := newF().Set(y)
	// Taylor series of sin r and cos r.
	s, c := newF().Set(r), bf(1)
	term := newF().Set(r)
	for k := int64(2); ; k++ {
		term.Mul(term, r)
		term.Quo(term, newF().SetInt64(k))
		if term.Sign() == 0 || term.MantExp(nil) < -refPrec-8 {
			break
		}
		t := newF().Set(term)
		if (k/2)%2 == 1 {
			t.Neg(t)
		}
		if k%2 == 0 {
			c.Add(c, t)
		} else {
			s.Add(s, t)
		}
	}
	switch n.Bit(0) | n.Bit(1)<<1 {
	case 1:
		s, c = c, s.Neg(s)
	case 2:
		s, c = s.Neg(s), c.Neg(c)
	case 3:
		s, c = c.Neg(c), s
	}
	if x < 0 {
		s.Neg(s)
	}
	return s, c
}

// refErf returns erf x for |x| < 7 from its Maclaurin series
// 2/√π · Σ (−1)^n x^(2n+1) / (n!·(2n+1)), at 500 bits against the
// cancellation of terms up to e^49.
func refErf(x float64) *big.Float {
	refConsts()
	const p = 500
	nf := func() *big.Float { return new(big.Float).SetPrec(p) }
	bx := nf().SetFloat64(x)
	x2 := nf().Mul(bx, bx)
	pow := nf().Set(bx) // x^(2n+1)/n!
	sum := nf().Set(bx)
	for n := int64(1); ; n++ {
		pow.Mul(pow, x2)
		pow.Quo(pow, nf().SetInt64(n))
		pow.Neg(pow)
		term := nf().Quo(pow, nf().SetInt64(2*n+1))
		if term.Sign() == 0 || float64(n) > x*x+1 && term.MantExp(nil) < sum.MantExp(nil)-p {
			break
		}
		sum.Add(sum, term)
	}
	sum.Mul(sum, big.NewFloat(2))
	return newF().Quo(sum, refSqrtPi)
}

// refPow returns x^y for x > 0.
func refPow(x, y float64) *big.Float {
	t := refLog(bf(x))
	t.Mul(t, bf(y))
	return refExp(t)
}

// ulps returns |got − want| in units of the last place of want rounded to
// float64 (2^-1074 in the subnormal range).
func ulps(got float64, want *big.Float) float64 {
	d := newF().Sub(bf(got), want)
	d.Abs(d)
	if d.Sign() == 0 {
		return 0
	}
	e := -1074
	if want.Sign() != 0 {
		e = max(want.MantExp(nil)-53, -1074)
	}
	u, _ := d.SetMantExp(d, -e).Float64()
	return u
}
