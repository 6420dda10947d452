package ref

import (
	"math"
	"testing"
)

// TestRandomBatchDrawsAsRandomMatrix checks that RandomBatch draws the
// values of successive RandomMatrix calls, and that its matrices are
// consecutive views of one slice (NewBatch): the last value of one is
// followed in memory by the first of the next.
func TestRandomBatchDrawsAsRandomMatrix(t *testing.T) {
	const rows, r, c, std = 3, 5, 4, 0.7
	batch := RandomBatch(NewRand(7), rows, r, c, std)
	rng := NewRand(7)
	for b := 0; b < rows; b++ {
		want := RandomMatrix(rng, r, c, std)
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				if got, w := batch[b].At(i, j), want.At(i, j); math.Float64bits(got) != math.Float64bits(w) {
					t.Fatalf("batch row %d at (%d, %d): %v, RandomMatrix drew %v", b, i, j, got, w)
				}
			}
		}
	}
	all := batch[0].RawMatrix().Data[:rows*r*c]
	for b, m := range batch {
		if &m.RawMatrix().Data[0] != &all[b*r*c] {
			t.Errorf("batch row %d does not start at value %d of the first row's slice", b, b*r*c)
		}
	}
}
