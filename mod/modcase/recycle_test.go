package modcase

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/modref/modref/golden/format"
)

// TestRecycledMembersSameBits runs the float32 and bf16 families as
// Float32Tolerances and ProfileTolerances do, each member's arrays widened
// into the last measured member's, its passes on the last member's tape
// and a layer case's mod layer and rounded inputs built once, and as
// PortableFamily does, each member in fresh memory: every
// member's arrays hash the same, on a layer case with LayerNorm (two
// statistics members), a model case and a MoDE case.
func TestRecycledMembersSameBits(t *testing.T) {
	for _, name := range []string{"layer-layernorm-swiglu", "model-every-other", "layer-mode-staged"} {
		c := load(t, name)
		for _, prof := range []string{"float32", "bf16"} {
			p, _ := format.ParseProfile(prof)
			fam, err := PortableFamily(c, p)
			if err != nil {
				t.Fatal(err)
			}
			var recycled []string
			err = eachMember(c, p, true, new(freeFloats), func(m Member) error {
				recycled = append(recycled, memberHash(m))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(recycled) != len(fam) || len(fam) < 6 {
				t.Fatalf("%s, %s: %d members recycled, %d fresh", name, prof, len(recycled), len(fam))
			}
			for i, m := range fam {
				if h := memberHash(m); recycled[i] != h {
					t.Errorf("%s, %s, member %q: %s recycled, %s fresh", name, prof, m.Name, recycled[i], h)
				}
			}
		}
	}
}

// memberHash is the SHA-256 of a member's arrays (hashArrays).
func memberHash(m Member) string {
	h := sha256.New()
	hashArrays(h, m.Arrays)
	return hex.EncodeToString(h.Sum(nil))[:16]
}
