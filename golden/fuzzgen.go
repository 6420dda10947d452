package golden

import (
	"github.com/modref/modref/golden/format"
)

// GenerateUnmeasured generates the case g describes as GenerateFromConfig
// does (the same draws, redrawn until every routing decision is clear of a
// tie, so the same arrays), but leaves its catches empty instead of
// measuring them: measuring recomputes the case under every deviation of
// docs/spec.md §11 with finite-difference gradients, which a fuzzer, that
// generates a case per draw and judges a candidate on it, does not need
// (`modref fuzz`, docs/fuzzing.md). Its float32 tolerances are set by tol,
// as GenerateFromConfig's.
func GenerateUnmeasured(g *GenConfig, tol Tolerancer) (*format.Case, error) {
	c, err := generateCase(g)
	if err != nil {
		return nil, err
	}
	if err := tol.apply(c); err != nil {
		return nil, err
	}
	c.Manifest.Catches = []string{}
	return c, nil
}
