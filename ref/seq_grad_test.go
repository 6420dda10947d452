package ref

import (
	"testing"

	"github.com/modref/modref/spec"
	"pgregory.net/rapid"
)

// dotRows returns Σ a⊙b of two equally long slices, products rounded.
func dotRows(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += float64(a[i] * b[i])
	}
	return s
}

// TestBlockBackwardIsTheFiniteDifferences checks blockBackward, every
// parameter's gradient and the input's, against central differences of
// L = Σ U⊙f(X) on drawn configurations (drawBlockConfig) and sequences of
// 1 to 8 or 126 to 140 tokens (past a block of attentionBlock queries) at gapped
// positions.
func TestBlockBackwardIsTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		c := drawBlockConfig(t)
		p := NewBlockParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
		n := rapid.OneOf(rapid.IntRange(1, 8), rapid.IntRange(attentionBlock-2, attentionBlock+12)).Draw(t, "n")
		pos := drawPositions(t, n)
		rng := NewRand(rapid.Uint64().Draw(t, "xseed"))
		x := rawRows(RandomMatrix(rng, n, c.D, 1))
		u := rawRows(RandomMatrix(rng, n, c.D, 1))
		loss := func() (float64, error) {
			ac := blockForward(c, &p, x, pos)
			return dotRows(ac.update().RawMatrix().Data, u), nil
		}
		g := zeroBlockLike(&p)
		dx := blockBackward(c, signed, &p, &g, blockForward(c, &p, x, pos), u)
		e.compare(t, "x", dx, loss, x)
		gts := g.Tensors("")
		for k, pt := range p.Tensors("") {
			e.compare(t, pt.Name, gts[k].Data, loss, pt.Data)
		}
	})
	e.report(t)
}

// TestNormBackwardIsTheFiniteDifferences checks NormBackward, the input's
// gradient and the gain's (and LayerNorm's bias's), against central
// differences of L = Σ U⊙N(X) under the norms of drawn block
// configurations, X of 1 to 6 rows.
func TestNormBackwardIsTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		c := drawBlockConfig(t)
		p := NewBlockParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
		n := rapid.IntRange(1, 6).Draw(t, "n")
		rng := NewRand(rapid.Uint64().Draw(t, "xseed"))
		x, u := RandomMatrix(rng, n, c.D, 1), RandomMatrix(rng, n, c.D, 1)
		loss := func() (float64, error) {
			y, _ := normRows(c, p.Norm1, p.Norm1Bias, rawRows(x), n, c.D)
			return dotRows(y, rawRows(u)), nil
		}
		g := zeroBlockLike(&p)
		dx := NormBackward(c, p.Norm1, p.Norm1Bias, x, u, g.Norm1, g.Norm1Bias)
		e.compare(t, "x", rawRows(dx), loss, x.RawMatrix().Data)
		e.compare(t, "Norm1", g.Norm1, loss, p.Norm1)
		if c.Norm == spec.NormLayer {
			e.compare(t, "Norm1Bias", g.Norm1Bias, loss, p.Norm1Bias)
		}
	})
	e.report(t)
}
