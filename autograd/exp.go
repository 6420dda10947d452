package autograd

import "github.com/modref/modref/autograd/internal/kernel"

// exp returns eˣ by kernel.Exp, the exponential of softmax, attention and
// cross-entropy (see there for its accuracy and bits). The operations
// themselves take a row at a time, by kernel.ExpShifted, which gives the
// same bits on every path; this scalar form is what the tests of its
// accuracy measure.
func exp(x float64) float64 { return kernel.Exp(x) }
