// Package golden is modref's answer key for Mixture-of-Depths
// implementations: the generator that draws the golden corpus's cases
// (modref gen), and the corpus itself. It composes four packages below it
// (docs/design.md, "Dependencies"): golden/format (the case format and the
// corpus reader), golden/oracle (a case's expected values computed from
// package ref), golden/judge (the comparison of a candidate with a case,
// modref check) and golden/diagnose (the deviation a failing candidate
// makes, modref diagnose). Embedded returns the corpus this package
// carries, and DefaultDir is where it lives in this repository.
//
// # Candidates
//
// A candidate is what the implementation under test computed for a case: a
// map from candidate names (format.CandidateName: the expected array names without "expected.",
// and the "grad." names) to format.Arrays, usually read from an .npz file with
// format.ReadNPZ. judge.Compare judges it array by array: an element passes when
// |c − e| ≤ atol + rtol·|e| with the tolerance the manifest states for that
// array; integer arrays and routing decisions must match exactly, and a
// routing mismatch is reported per row with the router-weight gap it
// crossed, so that a flip inside the near-tie margin (oracle.RoutingMargin) is
// told apart from a decisive one. A missing array, a wrong shape or dtype,
// or a NaN or infinite value is bad input and returns an error naming the
// array. golden/python/modref_golden.py writes candidates from Python.
//
// # Precisions and near-tie flips
//
// A candidate that computes in bf16, fp16 or with TF32 products is judged
// under a format.Profile (format.ParseProfile): judge.Tolerances replaces a
// case's tolerances by a multiple of the error of an emulated
// implementation of that precision (mod/modcase's Emulate computes its
// arrays) plus a floor, and sets the near-tie margin from the router
// logits' tolerance. judge.JudgeFlips re-judges a comparison that failed on
// routing decisions within that margin against the truth recomputed at the
// candidate's own decisions, in every routed layer in order, and reports
// the flips (judge.FlipReport); judge.FlipLimit bounds how many a precision explains
// (docs/tolerances.md).
//
// # Diagnosis
//
// diagnose.Diagnose recomputes a case as an implementation with each known deviation
// of docs/spec.md §11 would compute it (format.Deviations lists them) and judges
// the candidate against each, so that a failing implementation learns which
// mistake it makes. diagnose.DeviantCandidate returns one such deviant
// implementation's candidate.
//
// # Generation
//
// Generate computes every case of the catalogue from ref, deterministically
// from fixed seeds; WriteCorpus writes them (modref gen), and
// TestCorpusIsRegenerated checks that the committed corpus is exactly what
// the generator produces. oracle.RefCandidate recomputes a case from its own
// inputs and parameters. golden/torch checks the corpus against an
// independent PyTorch implementation of docs/spec.md.
package golden
