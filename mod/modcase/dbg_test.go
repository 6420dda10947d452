package modcase

import (
	"fmt"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

func TestDbgLoss(t *testing.T) {
	for _, n := range []string{"layer-layernorm-swiglu", "layer-jitter", "layer-mode-integrated", "layer-predictor", "layer-short-row", "layer-linear-bias-sigmoid"} {
		c := load(t, n)
		p, _ := format.ParseProfile("bf16")
		fam, _ := EmulateFamily(c, p)
		_, rep, _ := judge.Tolerances(p, c, FamilyArrays(fam)...)
		for _, a := range rep.Arrays {
			if a.Array == "loss" || a.Array == "grad.param.Wq" {
				fmt.Printf("%s %s err %.3g atol %.3g want %.3g | %s\n", n, a.Array, a.Err, a.Tolerance.ATol, maxAbs(c.Arrays[map[bool]string{true: a.Array, false: "expected." + a.Array}[a.Array[:4] == "grad"]].F), a.Tolerance.Reason)
			}
		}
		for _, m := range fam {
			e := c.Arrays["expected.loss"].F[0]
			fmt.Printf("   %s: loss err %.3g\n", m.Name, m.Arrays["loss"].F[0]-e)
		}
	}
}
