// Package diagnose names the known deviation of docs/spec.md §11 a failing
// implementation makes. Diagnose recomputes a case as an implementation
// with each deviation would compute it (its forward values, and its
// gradients by the deviant layer's backward pass with the routing frozen),
// judges the candidate against each with golden/judge, and, when none
// matches, combinations of the closest; DeviantCandidate returns one such
// deviant implementation's candidate. Each layer deviation is one unit in
// deviations_layer.go (its name, when it applies, what it changes); the
// emulated layer is diagnose_layer.go, the driver emulate_layer.go, the
// combination search diagnose_combine.go, the backward passes
// diagnose_grad.go. ComputedCatches, ModelCatches and MeasuredCatches say
// which deviations a case tells apart, the catches package golden's
// generator writes into its manifest.
package diagnose
