package fuzz

import (
	"sync/atomic"
	"testing"
)

var padCount struct{ changed atomic.Int64 }

// paddingProp is docs/spec.md §3: padded positions are never selected and
// contribute nothing to any loss. Redrawing everything at the padded
// positions (x, the random router's noise, the jitter) leaves the selection,
// every valid output and every loss (router BCE, predictor BCE, load
// balancing, the layer's auxiliary total) bit-identical.
func paddingProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{float32: impl.Float32})
		if c.in.Valid == nil {
			c.in.Valid = make([]int, c.rows)
			for b := range c.in.Valid {
				c.in.Valid[b] = src.Int(0, c.s-1, "V_b")
			}
		}
		c.cfg.LoadBalanceWeight = 0.25
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s: %v\n%s", impl.Name, err, c)
		}
		in2 := copyInputs(c.in)
		for b := range in2.X {
			fresh := genMatrix(src, c.rng, c.s, c.cfg.Block.D, false, c.f32)
			for i := c.in.Valid[b]; i < c.s; i++ {
				in2.X[b].SetRow(i, fresh.RawRowView(i))
				if in2.Noise != nil {
					in2.Noise[b][i] = 1e6 // would win every top-k if it counted
				}
				if in2.Jitter != nil {
					in2.Jitter[b][i] = -3
				}
				padCount.changed.Add(1)
			}
		}
		if c.f32 {
			roundInputs(in2)
		}
		res2, err := impl.Layer(c.cfg, c.p, in2)
		if err != nil {
			t.Fatalf("%s after changing padding: %v\n%s", impl.Name, err, c)
		}
		for b := 0; b < c.rows; b++ {
			for i := 0; i < c.s; i++ {
				if isSelected(res.Selection, b, i) != isSelected(res2.Selection, b, i) {
					t.Fatalf("%s: changing the padding (V_b = %d) flipped the selection of row %d position %d\n%s", impl.Name, c.in.Valid[b], b, i, c)
				}
			}
			for i := 0; i < c.in.Valid[b]; i++ {
				if j := rowDiff(res.Out[b], res2.Out[b], i); j >= 0 {
					t.Fatalf("%s: changing the padding changed valid row %d position %d column %d from %v to %v\n%s",
						impl.Name, b, i, j, res.Out[b].At(i, j), res2.Out[b].At(i, j), c)
				}
			}
		}
		for _, l := range []struct {
			name string
			a, b float64
		}{
			{"router BCE", res.RouterBCE, res2.RouterBCE},
			{"predictor BCE", res.PredictorBCE, res2.PredictorBCE},
			{"load balance", res.LoadBalance, res2.LoadBalance},
			{"auxiliary loss", res.AuxLoss, res2.AuxLoss},
		} {
			if !same(l.a, l.b) {
				t.Fatalf("%s: changing the padding changed the %s from %v to %v (difference %.3g)\n%s", impl.Name, l.name, l.a, l.b, l.b-l.a, c)
			}
		}
	}
}

func TestPaddingIsInert(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			padCount.changed.Store(0)
			check(t, paddingProp(impl))
			if padCount.changed.Load() == 0 {
				t.Fatalf("%s: no padded position was changed in 100 draws", impl.Name)
			}
			t.Logf("%s: padded positions redrawn: %d", impl.Name, padCount.changed.Load())
		})
	}
}

func FuzzPadding(f *testing.F) { f.Fuzz(fuzzImpls(paddingProp, Impls)) }
