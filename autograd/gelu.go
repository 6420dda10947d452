package autograd

import "math"

// GELU in float32 without math.Erf.
//
// GELU(x) = x·Φ(x) and GELU'(x) = Φ(x) + x·φ(x), with Φ the standard normal
// distribution function and φ its density. On [geluLo, −geluLo) both Φ and
// Φ + x·φ are evaluated as degree-geluDeg polynomials in u = x − c around the
// centre c of each interval of width 1/geluPerUnit: their Taylor series,
// whose coefficients follow exactly from φ's derivatives,
//
//	φ⁽ʲ⁾(c) = (−1)ʲ Heⱼ(c) φ(c)  (Heⱼ the probabilists' Hermite polynomials),
//
// computed in float64 once and rounded to float32. With |u| ≤ 1/4 the
// truncation error is below 1e-9; what remains is float32 rounding (the
// bound and its measurement are in docs/tolerances.md and gelu_test.go).
// Outside the range Φ is 0 or 1 to within Φ(−8) ≈ 6e-16 and Φ + x·φ to
// within 8·φ(8) ≈ 4e-14.
const (
	geluLo      = -8
	geluPerUnit = 2
	geluPieces  = -2 * geluLo * geluPerUnit
	geluDeg     = 8
)

// geluPiece is one interval's centre and the coefficients, lowest degree
// first, of Φ (phi) and of Φ + x·φ (deriv) in powers of x − centre.
type geluPiece struct {
	centre     float32
	phi, deriv [geluDeg + 1]float32
}

var geluTable = makeGELUTable()

func makeGELUTable() (t [geluPieces]geluPiece) {
	for i := range t {
		c := geluLo + (float64(i)+0.5)/geluPerUnit
		pdf := math.Exp(-0.5*c*c) / math.Sqrt(2*math.Pi)
		// b[k] = φ⁽ᵏ⁾(c)/k!, from He₀ = 1, He₁ = x, Heₙ₊₁ = x·Heₙ − n·Heₙ₋₁.
		var b [geluDeg + 1]float64
		he0, he1 := 1.0, c
		fact := 1.0
		for k := 0; k <= geluDeg; k++ {
			if k > 0 {
				fact *= float64(k)
			}
			sign := 1.0
			if k%2 == 1 {
				sign = -1
			}
			b[k] = sign * he0 * pdf / fact
			he0, he1 = he1, float64(c*he1)-float64(float64(k+1)*he0)
		}
		// Φ(c+u) = Φ(c) + Σₖ≥₁ b[k−1]/k·uᵏ, and
		// (c+u)·φ(c+u) = Σₖ (c·b[k] + b[k−1])·uᵏ.
		var phi, deriv [geluDeg + 1]float64
		phi[0] = 0.5 * math.Erfc(-c/math.Sqrt2)
		deriv[0] = phi[0] + float64(c*b[0])
		for k := 1; k <= geluDeg; k++ {
			phi[k] = b[k-1] / float64(k)
			deriv[k] = phi[k] + float64(c*b[k]) + b[k-1]
		}
		t[i].centre = float32(c)
		for k := range phi {
			t[i].phi[k], t[i].deriv[k] = float32(phi[k]), float32(deriv[k])
		}
	}
	return t
}

// geluEval returns Φ(x) in float32, and Φ(x) + x·φ(x) when deriv is set.
// NaN gives NaN.
func geluEval(x float32, deriv bool) float32 {
	switch {
	case x < geluLo:
		return 0
	case x >= -geluLo:
		return 1
	case x != x:
		return x
	}
	// x − geluLo may round up to 2·(−geluLo) for x just below −geluLo.
	i := min(int((x-geluLo)*geluPerUnit), geluPieces-1)
	p := &geluTable[i]
	c := &p.phi
	if deriv {
		c = &p.deriv
	}
	u := x - p.centre
	y := c[8]
	y = float32(y*u) + c[7]
	y = float32(y*u) + c[6]
	y = float32(y*u) + c[5]
	y = float32(y*u) + c[4]
	y = float32(y*u) + c[3]
	y = float32(y*u) + c[2]
	y = float32(y*u) + c[1]
	return float32(y*u) + c[0]
}

// geluForward sets y = x·Φ(x) elementwise.
func geluForward(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = v * geluEval(v, false)
	}
}

// geluBackward adds g·(Φ(x) + x·φ(x)) into dx elementwise.
func geluBackward(dx, g, x []float32) {
	dx, g = dx[:len(x)], g[:len(x)]
	for i, v := range x {
		dx[i] += float32(g[i] * geluEval(v, true))
	}
}
