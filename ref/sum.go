package ref

import "math"

// Sum accumulates float64 values and products with compensation: the
// running sum and the rounding error of every addition and product
// (TwoSum, and the product's error by a fused multiply-add), as the
// algorithm Dot2 of Ogita, Rump and Oishi (2005, "Accurate sum and dot
// product") computes them. Its Value is as accurate as a sum computed in
// twice the precision and then rounded: within a rounding of the exact
// sum unless the terms cancel by more than 2⁵³. The truth's losses are
// such sums (docs/tolerances.md): a sum of thousands of terms in
// sequence errs by more than the float64 profile's floor. The zero Sum
// is 0.
type Sum struct {
	hi, lo float64
}

// Add adds x.
func (s *Sum) Add(x float64) {
	t := s.hi + x
	z := t - s.hi
	s.lo += (s.hi - (t - z)) + (x - z)
	s.hi = t
}

// AddProduct adds a·b, exactly before the sum's own rounding.
func (s *Sum) AddProduct(a, b float64) {
	// The explicit conversion rounds the product (docs/design.md, the FMA
	// rule): without it the compiler may fuse it into the addition of
	// Add once inlined (GOAMD64=v3 did: 2.3e7 ulp from the exact sum).
	h := float64(a * b)
	s.Add(h)
	s.lo += math.FMA(a, b, -h)
}

// Value returns the sum.
func (s *Sum) Value() float64 { return s.hi + s.lo }
