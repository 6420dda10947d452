package autograd

import "github.com/modref/modref/autograd/internal/kernel"

// GELU in float32 without math.Erf: Φ(x) and Φ(x) + x·φ(x) from a table of
// degree-8 polynomials, one per interval of width 1/geluPerUnit on
// [geluLo, −geluLo), 0 or 1 outside. The table, the scalar evaluation and
// the slice kernels (AVX-512, AVX2 and Go, bit-identical) are in package
// kernel (internal/kernel/gelu.go); the error bound and its measurement are
// in docs/tolerances.md and gelu_test.go.
const (
	geluLo      = kernel.GELULo
	geluPerUnit = kernel.GELUPerUnit
	geluPieces  = kernel.GELUPieces
)

// geluEval returns Φ(x) in float32, and Φ(x) + x·φ(x) when deriv is set.
// NaN gives NaN.
func geluEval(x float32, deriv bool) float32 { return kernel.GELUEval(x, deriv) }

// geluForward sets y = x·Φ(x) elementwise.
func geluForward(y, x []float32) { kernel.GELUForward(y, x) }

// geluBackward adds g·(Φ(x) + x·φ(x)) into dx elementwise.
func geluBackward(dx, g, x []float32) { kernel.GELUBackward(dx, g, x) }
