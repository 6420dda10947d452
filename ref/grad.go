package ref

import (
	"fmt"

	"gonum.org/v1/gonum/diff/fd"
)

// FDStep is the default step h of the central differences
// (f(x+h) - f(x-h)) / 2h. Its truncation error is h^2/6 |f”'| ~ 2e-11 |f”'|
// and its round-off error about eps|f|/h ~ 1e-11 |f| (eps = 2.2e-16), so for
// values and derivatives of order one both stay well below the 1e-8 relative
// tolerance the tests use.
const FDStep = 1e-5

// FDDerivative is the central finite-difference derivative of loss with
// respect to data[i], computed with gonum's diff/fd (formula fd.Central, step
// h; h <= 0 means FDStep). loss must read data, which is restored before
// returning. Hold every routing decision fixed inside loss (use the frozen
// forwards): top-k is discontinuous. The first error of loss is returned.
func FDDerivative(loss func() (float64, error), data []float64, i int, h float64) (float64, error) {
	if i < 0 || i >= len(data) {
		return 0, fmt.Errorf("finite differences: coordinate %d outside a parameter of length %d", i, len(data))
	}
	if h <= 0 {
		h = FDStep
	}
	orig := data[i]
	var firstErr error
	f := func(v float64) float64 {
		data[i] = v
		l, err := loss()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return l
	}
	g := fd.Derivative(f, orig, &fd.Settings{Formula: fd.Central, Step: h})
	data[i] = orig
	if firstErr != nil {
		return 0, fmt.Errorf("finite differences at coordinate %d: %w", i, firstErr)
	}
	return g, nil
}

// FDGradient is the central finite-difference gradient of loss with respect
// to every coordinate of data (gonum's fd.Gradient, formula fd.Central, step
// h; h <= 0 means FDStep). data is restored before returning.
func FDGradient(loss func() (float64, error), data []float64, h float64) ([]float64, error) {
	if h <= 0 {
		h = FDStep
	}
	orig := append([]float64(nil), data...)
	var firstErr error
	f := func(x []float64) float64 {
		copy(data, x)
		l, err := loss()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return l
	}
	g := fd.Gradient(nil, f, orig, &fd.Settings{Formula: fd.Central, Step: h})
	copy(data, orig)
	if firstErr != nil {
		return nil, fmt.Errorf("finite differences: %w", firstErr)
	}
	return g, nil
}
