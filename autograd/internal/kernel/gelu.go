package kernel

import "math"

// GELU in float32 without math.Erf.
//
// GELU(x) = x·Φ(x) and GELU'(x) = Φ(x) + x·φ(x), with Φ the standard normal
// distribution function and φ its density. On [GELULo, −GELULo) both Φ and
// Φ + x·φ are evaluated as degree-geluDeg polynomials in u = x − c around the
// centre c of each interval of width 1/GELUPerUnit: their Taylor series,
// whose coefficients follow exactly from φ's derivatives,
//
//	φ⁽ʲ⁾(c) = (−1)ʲ Heⱼ(c) φ(c)  (Heⱼ the probabilists' Hermite polynomials),
//
// computed in float64 once and rounded to float32. With |u| ≤ 1/4 the
// truncation error is below 1e-9; what remains is float32 rounding (the
// bound and its measurement are in docs/tolerances.md and autograd's
// gelu_test.go). Outside the range Φ is 0 or 1 to within Φ(−8) ≈ 6e-16 and
// Φ + x·φ to within 8·φ(8) ≈ 4e-14.
//
// GELUEval is the definition; GELUForward and GELUBackward apply it to
// slices, on the SIMD paths 16 (AVX-512) or 8 (AVX2) elements at a time with
// exactly the float32 operations of GELUEval in its order (asmgen/gelu.go),
// so every path gives the bits of the Go loops.
const (
	// GELULo is the lower end of the tabulated range [GELULo, −GELULo).
	GELULo = -8
	// GELUPerUnit is the number of pieces per unit of x.
	GELUPerUnit = 2
	// GELUPieces is the number of pieces of the table.
	GELUPieces = -2 * GELULo * GELUPerUnit
	// geluDeg is the degree of each piece's polynomials.
	geluDeg = 8
)

// geluTable holds the pieces coefficient-major, so that one coefficient of
// all GELUPieces pieces is one contiguous row of 128 bytes: the AVX-512
// kernels hold a row in two registers and select from it by piece, the AVX2
// kernels gather from it. Row k of phi (deriv) is the coefficient of uᵏ in
// Φ (in Φ + x·φ) around each piece's centre, u = x − centre. The assembly
// relies on this layout: centre at offset 0, phi at 128, deriv at
// 128·(geluDeg+2).
type geluTable struct {
	centre     [GELUPieces]float32
	phi, deriv [geluDeg + 1][GELUPieces]float32
}

// geluTab is the table every path reads.
var geluTab = makeGELUTable()

func makeGELUTable() (t geluTable) {
	for i := range GELUPieces {
		c := GELULo + float64((float64(i)+0.5)/GELUPerUnit)
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
		phi[0] = float64(0.5 * math.Erfc(-c/math.Sqrt2))
		deriv[0] = phi[0] + float64(c*b[0])
		for k := 1; k <= geluDeg; k++ {
			phi[k] = b[k-1] / float64(k)
			deriv[k] = phi[k] + float64(c*b[k]) + b[k-1]
		}
		t.centre[i] = float32(c)
		for k := range phi {
			t.phi[k][i], t.deriv[k][i] = float32(phi[k]), float32(deriv[k])
		}
	}
	return t
}

// GELUEval returns Φ(x) in float32, and Φ(x) + x·φ(x) when deriv is set.
// Below GELULo it returns 0, from −GELULo on 1, and x itself for NaN.
func GELUEval(x float32, deriv bool) float32 {
	switch {
	case x < GELULo:
		return 0
	case x >= -GELULo:
		return 1
	case x != x:
		return x
	}
	// x − GELULo may round up to 2·(−GELULo) for x just below −GELULo.
	i := min(int((x-GELULo)*GELUPerUnit), GELUPieces-1)
	c := &geluTab.phi
	if deriv {
		c = &geluTab.deriv
	}
	u := x - geluTab.centre[i]
	y := c[8][i]
	y = float32(y*u) + c[7][i]
	y = float32(y*u) + c[6][i]
	y = float32(y*u) + c[5][i]
	y = float32(y*u) + c[4][i]
	y = float32(y*u) + c[3][i]
	y = float32(y*u) + c[2][i]
	y = float32(y*u) + c[1][i]
	return float32(y*u) + c[0][i]
}

// GELUForward sets y[i] = x[i]·Φ(x[i]) for i < len(x) (y must be at least
// as long). y may be x itself.
func GELUForward(y, x []float32) {
	y = y[:len(x)]
	n := geluForwardAsm(active, y, x)
	geluForwardGo(y[n:], x[n:])
}

// GELUBackward adds g[i]·(Φ(x[i]) + x[i]·φ(x[i])) into dx[i] for i <
// len(x) (dx and g must be at least as long). Any of the three may be the
// same slice.
func GELUBackward(dx, g, x []float32) {
	dx, g = dx[:len(x)], g[:len(x)]
	n := geluBackwardAsm(active, dx, g, x)
	geluBackwardGo(dx[n:], g[n:], x[n:])
}

// geluForwardGo is GELUForward on the Go path.
func geluForwardGo(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = v * GELUEval(v, false)
	}
}

// geluBackwardGo is GELUBackward on the Go path.
func geluBackwardGo(dx, g, x []float32) {
	dx, g = dx[:len(x)], g[:len(x)]
	for i, v := range x {
		dx[i] += float32(g[i] * GELUEval(v, true))
	}
}
