package ref

import (
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// NewBatch returns rows zero matrices r×c that are consecutive views of one
// row-major rows×r×c slice: the layout of a case's B×S×d arrays, which can
// then share the batch's storage instead of copying it (the layer's
// output LayerResult.Out and its input gradient LayerGrads.X are made so).
func NewBatch(rows, r, c int) []*mat.Dense {
	data := make([]float64, rows*r*c)
	ms := make([]*mat.Dense, rows)
	for b := range ms {
		ms[b] = mat.NewDense(r, c, data[b*r*c:(b+1)*r*c])
	}
	return ms
}

// RandomBatch returns rows matrices r×c of N(0, std^2) draws from rng, the
// values of rows successive RandomMatrix calls, in one slice (NewBatch); a
// nil rng gives zeros.
func RandomBatch(rng *rand.Rand, rows, r, c int, std float64) []*mat.Dense {
	ms := NewBatch(rows, r, c)
	if rng != nil {
		for _, m := range ms {
			data := m.RawMatrix().Data[:r*c]
			for k := range data { // as RandomMatrix fills its matrix
				data[k] = std * normal(rng)
			}
		}
	}
	return ms
}
