package kernel

import "math"

// MaxAbsBits returns the largest of math.Float32bits(x[j]) & 0x7fffffff,
// the bits of |x[j]|, over x (0 if x is empty). As unsigned integers these
// bits order finite magnitudes as their values do and put +Inf above them
// and every NaN above +Inf, so that the result tells the largest |x[j]| and
// whether x holds an Inf or a NaN. The SIMD paths take 16 (AVX-512) or 8
// (AVX2) values at a time with integer operations: the loop's result
// exactly.
func MaxAbsBits(x []float32) uint32 {
	m, j := maxAbsAsm(active, x)
	for _, v := range x[j:] {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return m
}
