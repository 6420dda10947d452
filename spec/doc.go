// Package spec is the vocabulary of the contract, docs/spec.md: the
// configuration of a routed layer, a dense block and a model (router,
// capacity, weighting, compute, auxiliary objective, causal routing, layer
// pattern), the kind names, their validation, and their JSON form in the
// golden corpus (docs/golden-format.md).
//
// It holds no equation: the float64 reference (package ref) and the float32
// fast path (package mod) both import it and neither imports the other
// (docs/design.md, "Dependencies"). It imports only the standard library.
package spec
