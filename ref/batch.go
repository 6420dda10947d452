package ref

import "gonum.org/v1/gonum/mat"

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
