package ref

import (
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// TestMoDEGradientsAreTheFiniteDifferences checks MoDEGradients, every
// parameter's gradient and the input's, against central differences of
// L = Σ U⊙out of MoDEForwardFrozen with MoDEForward's decision frozen, on
// drawn staged and integrated layers (drawBlockConfig's block, 1 to 3
// experts, 1 or 2 no-op experts, capacities from 0.25 to 1).
func TestMoDEGradientsAreTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		c := spec.MoDEConfig{Block: drawBlockConfig(t), Experts: rapid.IntRange(1, 3).Draw(t, "experts"),
			ExpertCapacity: rapid.SampledFrom([]float64{0.25, 0.5, 1}).Draw(t, "expertcap")}
		if rapid.Bool().Draw(t, "staged") {
			c.Form, c.Capacity = spec.MoDEStaged, rapid.SampledFrom([]float64{0.25, 0.5, 1}).Draw(t, "capacity")
		} else {
			c.Form, c.NoOpExperts = spec.MoDEIntegrated, rapid.IntRange(1, 2).Draw(t, "noop")
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("drawn configuration: %v", err)
		}
		p := NewMoDEParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
		rng := NewRand(rapid.Uint64().Draw(t, "xseed"))
		rows, s := rapid.IntRange(1, 3).Draw(t, "B"), rapid.IntRange(1, 10).Draw(t, "S")
		var x, u []*mat.Dense
		for range rows {
			x = append(x, RandomMatrix(rng, s, c.Block.D, 1))
			u = append(u, RandomMatrix(rng, s, c.Block.D, 1))
		}
		res, err := MoDEForward(c, p, x)
		if err != nil {
			t.Fatal(err)
		}
		fz := res.Frozen
		loss := func() (float64, error) {
			r, err := MoDEForwardFrozen(c, p, x, fz)
			if err != nil {
				return 0, err
			}
			l := 0.0
			for b := range u {
				l += dotRows(r.Out[b].RawMatrix().Data, u[b].RawMatrix().Data)
			}
			return l, nil
		}
		_, g, err := MoDEGradients(c, p, x, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		for b, xb := range x {
			e.compare(t, "X", g.X[b].RawMatrix().Data, loss, xb.RawMatrix().Data)
		}
		gts, pts := g.Params.Tensors(""), p.Tensors("")
		if len(gts) != len(pts) {
			t.Fatalf("%d gradient tensors for %d parameters", len(gts), len(pts))
		}
		for k, pt := range pts {
			e.compare(t, pt.Name, gts[k].Data, loss, pt.Data)
		}
	})
	e.report(t)
}
