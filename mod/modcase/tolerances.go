package modcase

import (
	"fmt"
	"math"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// Float32Tolerances widens a generated case's manifest tolerances where
// the float32 precision profile's family of emulated implementations
// (EmulateFamily) needs more than the manifests' constants: each float
// array's atol becomes the larger of the constant's and the float32
// profile's (Multiple × the family's largest error + its floor), rtol
// unchanged, so that every correct float32 implementation the family spans
// passes the case as it is printed, at any shape (docs/tolerances.md, "The
// golden corpus"). A tolerance is never tightened below the constants,
// which PyTorch in float32 was measured against; the reason of a widened
// one says by how much and why. The family runs with the Go loops' bits
// (PortableFamily), so that a case's tolerances, and so its bytes, are the
// same on every machine; each member is measured as it is computed
// (judge.FamilyErrors), so that one member's arrays are held at a time. It
// is golden.Tolerancer for gen, gen --config and fuzz.
func Float32Tolerances(c *format.Case) error {
	p, _ := format.ParseProfile("float32")
	jc, _, err := ProfileTolerances(c, p)
	if err != nil {
		return err
	}
	for i, info := range c.Manifest.Arrays {
		old, prof := info.Tolerance, jc.Manifest.Arrays[i].Tolerance
		if info.Role != format.RoleExpected || old == nil || prof == nil || prof == old || prof.ATol <= old.ATol {
			continue
		}
		widened := *old
		widened.ATol = prof.ATol
		widened.Reason = fmt.Sprintf("%s Widened on this case from atol %.3g to %.3g (%.1f×): the float32 profile's tolerance, %s.",
			old.Reason, old.ATol, prof.ATol, prof.ATol/math.Max(old.ATol, math.SmallestNonzeroFloat64), prof.Reason)
		c.Manifest.Arrays[i].Tolerance = &widened
	}
	return nil
}

// ProfileTolerances returns a copy of c judged under profile p
// (judge.Tolerances) and the measurements, from p's family of emulated
// implementations run with the Go loops' bits (PortableFamily), each
// member measured as it is computed: the same tolerances, and so the same
// verdicts, on every machine and kernel path, with one member's arrays
// held at a time. check, diagnose and fuzz judge under a profile with it.
// A case the profile does not judge (format.Profile.Judges: LayerNorm
// narrower than format.MinLayerNormD under bf16 or fp16) is an error.
func ProfileTolerances(c *format.Case, p format.Profile) (*format.Case, *judge.ProfileReport, error) {
	if p.IsZero() {
		return c, nil, nil
	}
	if err := p.Judges(c.Manifest.Config); err != nil {
		return nil, nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	if p.Name == "float64" {
		fam, err := float64Family(c, true)
		if err != nil {
			return nil, nil, err
		}
		return judge.Tolerances(p, c, FamilyArrays(fam)...)
	}
	var fe judge.FamilyErrors
	// fe.Add keeps each array's largest error only, so a member's arrays
	// are free once it is measured.
	if err := eachMember(c, p, true, new(freeFloats), func(m Member) error { return fe.Add(p, c, m.Arrays) }); err != nil {
		return nil, nil, err
	}
	return fe.Tolerances(p, c)
}
