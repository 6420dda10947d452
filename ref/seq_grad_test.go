package ref

import (
	"testing"

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
