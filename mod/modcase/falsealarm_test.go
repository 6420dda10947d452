package modcase

import (
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// falseAlarmsDir holds fuzz draws on which a correct PyTorch
// implementation failed its profile, with its output on each:
// testdata/false-alarms/README.txt.
const falseAlarmsDir = "testdata/false-alarms"

// TestFalseAlarmsPass judges PyTorch's output on each committed false
// alarm under its profile with the family's tolerances: every array must
// pass. With one random rounding draw, and RMSNorm only in mod's
// x·rsqrt(·) form, fuzz-13-56 failed grad.param.Norm1 at 1.45 (PyTorch
// errs 2.14e-6, 61 units of float32 of the array's largest value; twelve
// random rounding draws err 6.3e-8 to 1.7e-6) and fuzz-11-88 failed
// grad.param.L3.RouterBias at 1.5 (docs/tolerances.md, "Monte Carlo
// draws"); with every member's BCEWithLogits gradient computed in float64,
// fuzz-19-97 failed grad.param.L1.PredW2 at 1.001 (docs/tolerances.md,
// "Loss gradients as PyTorch computes them").
// Without the bf16 member whose small products accumulate in
// bf16 (cpuAccumulatesInBF16), fuzz-18-58 failed grad.param.L0.PredW2 at
// 1.83 (PyTorch 1.13 under CPU autocast sums that one-column weight's
// gradient over 150 tokens in bf16; "Products accumulated in bf16"); and
// PyTorch in pure bf16 failed the same case's grad.param.FinalNormBias at
// 1.4 until the pure-bf16 members summed LayerNorm's gain and bias
// gradients over the rows in bf16, as native layer_norm does
// (autograd.Rounding.NormSums).
func TestFalseAlarmsPass(t *testing.T) {
	for _, tc := range []struct{ name, candidate, profile string }{
		{"fuzz-13-56", "candidate", "float32"},
		{"fuzz-11-88", "candidate", "bf16"},
		{"fuzz-19-97", "candidate", "float32"},
		{"fuzz-18-58", "candidate", "bf16"},
		{"fuzz-18-58", "pure.candidate", "bf16"},
	} {
		c, err := format.Load(falseAlarmsDir, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := format.ParseProfile(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		// As check, diagnose and fuzz judge under a profile.
		jc, _, err := ProfileTolerances(c, p)
		if err != nil {
			t.Fatal(err)
		}
		cand, err := format.ReadCandidate(falseAlarmsDir+"/"+tc.name+"."+tc.candidate+".npz", c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := judge.Compare(jc, cand, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Arrays {
			if a.Status != judge.StatusPass {
				t.Errorf("%s under %s: %s %s, max abs %.3g at %v, atol %.3g (%s)", tc.name, tc.profile, a.Name, a.Status, a.MaxAbs, a.Where, a.Tolerance.ATol, a.Tolerance.Reason)
			}
		}
	}
}
