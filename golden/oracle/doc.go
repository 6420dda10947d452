// Package oracle computes the golden corpus's expected values from package
// ref: a case built from a configuration, parameters, inputs and upstream
// gradient (LayerCase, ModelCase, MoDECase, with Builder and the arrays'
// tolerances, ToleranceFor), and a case recomputed from its own inputs and
// parameters (Recompute, RefCandidate), the truth the judge compares with
// and recomputes at a candidate's own routing decisions. It draws nothing:
// choosing the configurations, seeds and ties is package golden's
// generator, above it; the case format is package golden/format, below it.
package oracle
