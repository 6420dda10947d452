package kernel

// ScaleShifted sets g[j] = float32(float64(y[j]) * (float64(g[j]) - s))
// for every j < len(g): a row of softmax's gradient (attention's
// dS = P ⊙ (dP − rowsum(dP ⊙ P))) from its probabilities y, its upstream
// gradient (dP) in g and s = Σ g·y. y must hold at least len(g) values. The
// SIMD paths take 8 (AVX-512) or 4 (AVX2) values at a time with the same
// correctly rounded operations, so with the bits of the Go loop, except
// that a NaN result's sign and payload are not fixed: where both factors
// are NaN, x86 keeps one operand's, and which is the compiler's choice in
// Go code too.
func ScaleShifted(g, y []float32, s float64) {
	y = y[:len(g)]
	j := scaleShiftedAsm(active, g, y, s)
	for ; j < len(g); j++ {
		g[j] = float32(float64(y[j]) * (float64(g[j]) - s))
	}
}
