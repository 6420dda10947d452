package oracle

import (
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/ref"
)

// TestBatchArraySharesOnlyAFlatBatch checks that BatchArray flattens a
// batch row by row whatever its storage, and shares the storage only of
// matrices that are consecutive views of one slice (ref.NewBatch): a
// strided view or separately allocated matrices are copied.
func TestBatchArraySharesOnlyAFlatBatch(t *testing.T) {
	const rows, r, c = 3, 4, 5
	fill := func(ms []*mat.Dense) {
		for b, m := range ms {
			for i := 0; i < r; i++ {
				for j := 0; j < c; j++ {
					m.Set(i, j, float64(100*b+10*i+j))
				}
			}
		}
	}
	flat := ref.NewBatch(rows, r, c)
	apart := make([]*mat.Dense, rows)
	strided := make([]*mat.Dense, rows)
	for b := range apart {
		apart[b] = mat.NewDense(r, c, nil)
		strided[b] = mat.NewDense(r, c+2, nil).Slice(0, r, 1, c+1).(*mat.Dense)
	}
	for _, tc := range []struct {
		name  string
		ms    []*mat.Dense
		share bool
	}{{"ref.NewBatch", flat, true}, {"separate matrices", apart, false}, {"strided views", strided, false}} {
		fill(tc.ms)
		a := BatchArray(tc.ms)
		if len(a.F) != rows*r*c {
			t.Fatalf("%s: %d values, want %d", tc.name, len(a.F), rows*r*c)
		}
		for k, v := range a.F {
			b, i, j := k/(r*c), k/c%r, k%c
			if want := float64(100*b + 10*i + j); v != want {
				t.Fatalf("%s: value %d (batch row %d, %d, %d) is %v, want %v", tc.name, k, b, i, j, v, want)
			}
		}
		tc.ms[rows-1].Set(r-1, c-1, -1)
		if shared := a.F[len(a.F)-1] == -1; shared != tc.share {
			t.Errorf("%s: the array shares the matrices' storage: %v, want %v", tc.name, shared, tc.share)
		}
	}
}
