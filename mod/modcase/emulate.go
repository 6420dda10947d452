package modcase

import (
	"fmt"
	"maps"
	"slices"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

// Emulate runs an emulated implementation of a precision profile on a case
// and returns its arrays under candidate names: the baseline that
// judge.Tolerances measures. The points it rounds
// (docs/tolerances.md, "Precision profiles"):
//
//   - float64: ref itself (oracle.RefCandidate), the truth's own
//     arithmetic; its error is 0 and only the floor remains.
//   - every profile but float64: the rotary angles computed in float32
//     (nn.RoPE.Float32Angles), as PyTorch and Hugging Face implementations
//     compute them even under autocast: at thousands of positions their
//     error is the largest such an implementation makes (at S = 2048 it
//     made PyTorch's float32 error on the query and key weight gradients
//     12 times that of an emulation with mod's float64 angles).
//   - float32: mod on the case, float32 throughout.
//   - tf32: mod with every matrix product's and attention's operands
//     rounded to tf32 (autograd.Rounding.Operand), accumulation and
//     results in float32, as tensor cores compute with TF32 enabled.
//   - bf16, fp16: the case's inputs, parameters and upstream gradient
//     rounded to the format (a low-precision model's tensors), products'
//     operands and results and attention's q, k, v and output rounded
//     (autocast stores a product's result in the format), their gradients
//     likewise, and every array written rounded (the candidate's tensors
//     are in the format). Norms, softmax, losses and elementwise
//     operations stay float32, as autocast keeps them.
//
// Where the emulation routes a near-tie otherwise than the truth (a
// decision within the format's error of a tie), judge.Tolerances
// measures its errors against the truth at its own decisions.
func Emulate(c *format.Case, p format.Profile) (map[string]*format.Array, error) {
	switch {
	case p.IsZero():
		return nil, fmt.Errorf("the zero profile has no emulation: its tolerances are the manifest's")
	case p.Name == "float64":
		return oracle.RefCandidate(c)
	}
	run := c
	em := emulation{angles32: true}
	if p.Products != nil {
		em.rnd.Operand = p.Products.Round32
	}
	if p.Storage != nil {
		em.rnd.Result = p.Storage.Round32
		run = &format.Case{Manifest: c.Manifest, Arrays: maps.Clone(c.Arrays)}
		for _, info := range c.Manifest.Arrays {
			a := c.Arrays[info.Name]
			if info.Role == format.RoleExpected || a.F == nil {
				continue
			}
			r := &format.Array{Shape: a.Shape, F: slices.Clone(a.F), DType: a.DType}
			p.Storage.RoundAll(r.F)
			run.Arrays[info.Name] = r
		}
	}
	got, err := candidate(run, em)
	if err != nil {
		return nil, fmt.Errorf("precision %s: %w", p.Name, err)
	}
	if p.Storage != nil {
		for _, a := range got {
			p.Storage.RoundAll(a.F)
		}
	}
	return got, nil
}
