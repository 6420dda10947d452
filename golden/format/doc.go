// Package format is the golden corpus's case format (docs/golden-format.md)
// and the bottom of package golden: what a case is, how it is read and
// written, and nothing that computes one.
//
// A case is a small, complete problem in the terms of docs/spec.md: one
// routed layer (KindLayer), a language model (KindModel), token-by-token
// causal decoding (KindDecode) or a Mixture-of-Depths-and-Experts layer
// (KindMoDE, docs/spec.md §14), with its configuration (CaseConfig), inputs,
// parameters, an upstream gradient that defines a scalar loss, and every
// value an implementation should compute, gradients included, in float64.
// On disk a case is NAME.json, the Manifest, beside NAME.npz, its Arrays in
// NumPy's format. A Corpus is a set of cases: Dir reads one on disk, and
// package golden's Embedded the one compiled into the program. A Corpus's
// Load reads a case as untrusted input (regular files only, every size
// checked against a bound before it is allocated, CheckBounds and
// RecomputeWork) and checks that its arrays are exactly those its manifest
// lists; List names its cases. ReadNPZ and WriteNPZ read and write .npz
// archives, ReadCandidate a candidate's for a case, under the names
// CandidateName gives the expected arrays.
//
// The vocabulary a manifest's fields draw on is here too, so that a
// manifest can be validated where it is read: the deviations of
// docs/spec.md §11 its "catches" names (Deviations; package golden emulates
// them) and the precision profiles its "precision" names (Profile; package
// golden computes a profile's tolerances).
package format
