package fuzz

import (
	"math"
	"sync/atomic"
	"testing"

	"github.com/modref/modref/spec"
)

var nanCount struct{ rejected, padded atomic.Int64 }

// nanLayerProp is docs/spec.md §4 at the layer: a NaN that reaches a
// valid token's router weight (through x, or the random router's noise) is
// an error naming its row and position; a NaN in a padded position is never
// selected, never attended to, and leaves every valid output free of NaN.
func nanLayerProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{float32: impl.Float32})
		b := src.Int(0, c.rows-1, "NaN row")
		i := src.Int(0, c.s-1, "NaN position")
		v := validLen(c.in.Valid, b, c.s)
		if c.cfg.Router == spec.RouterRandom {
			c.in.Noise[b][i] = math.NaN()
		} else {
			c.in.X[b].Set(i, src.Int(0, c.cfg.Block.D-1, "NaN column"), math.NaN())
		}
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if i < v {
			if !namesRowPosition(err, b, i) {
				t.Fatalf("%s: NaN router weight at row %d position %d (V_b = %d): got error %v, want one naming row %d and position %d\n%s", impl.Name, b, i, v, err, b, i, c)
			}
			nanCount.rejected.Add(1)
			return
		}
		if err != nil {
			t.Fatalf("%s: a NaN at padded row %d position %d (V_b = %d) was not ignored: %v\n%s", impl.Name, b, i, v, err, c)
		}
		nanCount.padded.Add(1)
		for bb := 0; bb < c.rows; bb++ {
			for ii := 0; ii < validLen(c.in.Valid, bb, c.s); ii++ {
				for j := 0; j < c.cfg.Block.D; j++ {
					if math.IsNaN(res.Out[bb].At(ii, j)) {
						t.Fatalf("%s: a NaN at padded row %d position %d reached the valid output at row %d position %d column %d\n%s", impl.Name, b, i, bb, ii, j, c)
					}
				}
			}
		}
	}
}

func TestNaNRouterWeightsAtTheLayer(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			nanCount.rejected.Store(0)
			nanCount.padded.Store(0)
			for range 3 {
				check(t, nanLayerProp(impl))
			}
			t.Logf("%s: rejected: %d, NaN in padding ignored: %d", impl.Name, nanCount.rejected.Load(), nanCount.padded.Load())
			if nanCount.rejected.Load() == 0 || nanCount.padded.Load() == 0 {
				t.Fatalf("%s: the generator did not produce both a NaN at a valid position and one in padding", impl.Name)
			}
		})
	}
}

func FuzzNaNLayer(f *testing.F) { f.Fuzz(fuzzImpls(nanLayerProp, Impls)) }
