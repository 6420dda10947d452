// Package judge compares another implementation's results, a candidate,
// with a golden case: Compare array by array, within each array's
// tolerance (an element passes when |c − e| ≤ atol + rtol·|e|; integer
// arrays and routing decisions exactly, a routing mismatch reported per row
// with the router-weight gap it crossed); Tolerances, a precision profile's
// tolerances measured on an emulated implementation; JudgeFlips, a
// comparison that failed on near-tie routing decisions judged again at the
// candidate's own decisions (FlipReport); and Depart, where a failing
// candidate first departs from the oracle, stage by stage. It recomputes
// truth through golden/oracle and reads cases of golden/format; the
// diagnosis and the generator in package golden are above it
// (docs/design.md, "Dependencies").
package judge
