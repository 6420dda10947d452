package oracle

import (
	"math"
	"strings"

	"github.com/modref/modref/golden/format"
)

// Tolerances for float32 candidates, relative to the scale of the expected
// array: an element passes when |c − e| ≤ atol + rtol·|e| with
// atol = scaleTol·max(‖e‖∞, 1). docs/tolerances.md gives the measurements
// behind them.
const (
	ForwardRTol     = 1e-5
	forwardScaleTol = 1e-5
	gradRTol        = 1e-4
	gradScaleTol    = 1e-5
	// RoutingMargin is the near-tie margin of docs/spec.md §4: router
	// weights (or causal routing scores) closer than this to the decision
	// boundary may flip between two correct float32 implementations.
	RoutingMargin = 1e-3
	// minCaseGap is the gap a generated case keeps above the margin unless
	// it tests ties.
	MinCaseGap = 1e-2
)

const (
	forwardReason = "float32 round-off: an independent float32 PyTorch implementation differs from " +
		"this float64 value by at most 3.1e-6·max(‖e‖∞, 1) over every forward array of the corpus " +
		"(docs/tolerances.md); the bound is about 3 times that. The float64 reference agrees with " +
		"PyTorch in float64 to 1e-13."
	gradReason = "float32 round-off of a backward pass: an independent float32 PyTorch implementation " +
		"differs by at most 6.8e-7·max(‖e‖∞, 1) over every gradient of the corpus; the bound is about " +
		"15 times that. The reference gradient (ref's analytic backward pass, routing frozen) agrees " +
		"with float64 PyTorch autograd to 1.6e-14 (docs/tolerances.md)."
	exactReason = "integers and 0/1 targets must match exactly; a routing mismatch is reported with its near-tie gap"
)

// ToleranceFor returns the tolerance of an expected array by its kind.
func ToleranceFor(name string, a *format.Array) *format.Tolerance {
	if a.IsInt() || strings.HasSuffix(name, ".targets") {
		return &format.Tolerance{Reason: exactReason}
	}
	scale := 1.0
	for _, v := range a.F {
		scale = math.Max(scale, math.Abs(v))
	}
	if strings.HasPrefix(name, "grad.") {
		return &format.Tolerance{RTol: gradRTol, ATol: gradScaleTol * scale, Reason: gradReason}
	}
	return &format.Tolerance{RTol: ForwardRTol, ATol: forwardScaleTol * scale, Reason: forwardReason}
}
