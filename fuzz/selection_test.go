package fuzz

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// Counters of the interesting cases the generators produced, read by the
// rapid tests so that a property cannot pass vacuously.
type counters struct{ padded, boundaryTie, nanErr, nanPadded, permuted, zeroRow atomic.Int64 }

var selCount counters

// selectionProp is docs/spec.md §3 and §4 for impl.SelectTopK: k_b tokens
// per row under the capacity rule (padding-aware), ascending, valid
// positions only, the k largest with ties to the lower position, equivariant
// under a permutation of distinct weights; a NaN weight is an error naming
// its row and position.
func selectionProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		rows, s := src.Int(1, 4, "B"), src.Int(1, 12, "S")
		capRule := genCapacity(src, s)
		valid := genValid(src, rows, s, false)
		r := make([][]float64, rows)
		for b := range r {
			r[b] = make([]float64, s)
			for i := range r[b] {
				r[b][i] = src.Pick(routerPalette, "r")
			}
		}
		nan := src.Int(0, 5, "nan") == 0
		if nan {
			b := src.Int(0, rows-1, "nan row")
			r[b][src.Int(0, s-1, "nan position")] = math.NaN()
		}
		if impl.Float32 {
			// mod reads float32 router weights: 1e-300 becomes 0, a tie.
			for b := range r {
				round32(r[b])
			}
		}
		k, err := ref.RowCapacities(capRule, rows, s, valid)
		if err != nil {
			t.Fatalf("RowCapacities(%+v, %d, %d, %v): %v", capRule, rows, s, valid, err)
		}
		checkCapacities(t, capRule, k, valid, s)
		sel, err := impl.SelectTopK(r, k, valid)

		// The first NaN at a valid position, in row-major order.
		nb, ni := -1, -1
		for b := 0; b < rows && nb < 0; b++ {
			for i := 0; i < validLen(valid, b, s); i++ {
				if math.IsNaN(r[b][i]) {
					nb, ni = b, i
					break
				}
			}
		}
		if nb >= 0 {
			if !namesRowPosition(err, nb, ni) {
				t.Fatalf("%s: NaN router weight at row %d position %d: got error %v, want one naming row %d and position %d", impl.Name, nb, ni, err, nb, ni)
			}
			selCount.nanErr.Add(1)
			return
		}
		if err != nil {
			t.Fatalf("%s: SelectTopK(r=%v, k=%v, valid=%v): %v", impl.Name, r, k, valid, err)
		}
		if nan {
			selCount.nanPadded.Add(1) // a NaN in padding is ignored
		}
		if valid != nil {
			selCount.padded.Add(1)
		}
		checkTopK(t, impl.Name, r, k, valid, sel)

		// Equivariance: permute each row's valid tokens; where a row's valid
		// weights are distinct the selection must move with them.
		perm := make([][]int, rows)
		rp := make([][]float64, rows)
		for b := range r {
			v := validLen(valid, b, s)
			perm[b] = make([]int, s)
			for i := range perm[b] {
				perm[b][i] = i
			}
			for i := v - 1; i > 0; i-- { // Fisher-Yates from the source
				j := src.Int(0, i, "perm")
				perm[b][i], perm[b][j] = perm[b][j], perm[b][i]
			}
			rp[b] = make([]float64, s)
			for i := range r[b] {
				rp[b][perm[b][i]] = r[b][i]
			}
		}
		selP, err := impl.SelectTopK(rp, k, valid)
		if err != nil {
			t.Fatalf("%s: SelectTopK on permuted weights: %v", impl.Name, err)
		}
		checkTopK(t, impl.Name, rp, k, valid, selP)
		for b := range r {
			if !distinct(r[b][:validLen(valid, b, s)]) {
				continue
			}
			selCount.permuted.Add(1)
			want := make([]bool, s)
			for _, i := range sel.Rows[b] {
				want[perm[b][i]] = true
			}
			for _, i := range selP.Rows[b] {
				if !want[i] {
					t.Fatalf("%s: row %d: permutation %v of distinct weights %v moved the selection %v to %v, want the image of %v",
						impl.Name, b, perm[b], r[b], sel.Rows[b], selP.Rows[b], sel.Rows[b])
				}
			}
		}
	}
}

// checkCapacities checks the padding-aware capacities of docs/spec.md §3:
// k_b in [1, V_b], 0 exactly when V_b = 0.
func checkCapacities(t failer, c spec.Capacity, k, valid []int, s int) {
	for b, kb := range k {
		v := validLen(valid, b, s)
		lo := 1
		if v == 0 {
			lo = 0
			selCount.zeroRow.Add(1)
		}
		if kb < lo || kb > v {
			t.Fatalf("capacity %+v: row %d with V_b = %d (S = %d) got k = %d, want %d <= k <= %d", c, b, v, s, kb, lo, v)
		}
	}
}

// checkTopK checks sel against the definition of docs/spec.md §4.
func checkTopK(t failer, name string, r [][]float64, k, valid []int, sel ref.Selection) {
	if len(sel.Rows) != len(r) {
		t.Fatalf("%s: selection has %d rows, want %d", name, len(sel.Rows), len(r))
	}
	for b, pos := range sel.Rows {
		s := len(r[b])
		v := validLen(valid, b, s)
		if len(pos) != k[b] {
			t.Fatalf("%s: row %d selects %d tokens %v, want k = %d (r = %v, V_b = %d)", name, b, len(pos), pos, k[b], r[b], v)
		}
		in := make([]bool, s)
		for j, i := range pos {
			if i < 0 || i >= v {
				t.Fatalf("%s: row %d selects position %d outside the %d valid positions (padded positions are never selected)", name, b, i, v)
			}
			if j > 0 && i <= pos[j-1] {
				t.Fatalf("%s: row %d positions %v are not strictly ascending (entry %d)", name, b, pos, j)
			}
			in[i] = true
		}
		// Every selected i beats every unselected valid j: r_i > r_j, or a
		// tie won by the lower position.
		for _, i := range pos {
			for j := 0; j < v; j++ {
				if in[j] {
					continue
				}
				if !(r[b][i] > r[b][j] || (r[b][i] == r[b][j] && i < j)) {
					t.Fatalf("%s: row %d selects position %d (r = %v) over position %d (r = %v); want the k largest, ties to the lower position (r = %v)",
						name, b, i, r[b][i], j, r[b][j], r[b])
				}
				if r[b][i] == r[b][j] {
					selCount.boundaryTie.Add(1)
				}
			}
		}
	}
}

func distinct(v []float64) bool {
	for i := range v {
		for j := i + 1; j < len(v); j++ {
			if v[i] == v[j] {
				return false
			}
		}
	}
	return true
}

// causalSelectionProp is docs/spec.md §9: impl.SelectCausal routes
// exactly the valid positions with a score > 0.
func causalSelectionProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		rows, s := src.Int(1, 4, "B"), src.Int(1, 12, "S")
		valid := genValid(src, rows, s, false)
		q := make([][]float64, rows)
		for b := range q {
			q[b] = make([]float64, s)
			for i := range q[b] {
				q[b][i] = src.Pick(routerPalette, "q")
			}
			if impl.Float32 {
				round32(q[b]) // 1e-300 becomes 0, not routed
			}
		}
		sel, err := impl.SelectCausal(q, valid)
		if err != nil {
			t.Fatalf("%s: SelectCausal(%v, %v): %v", impl.Name, q, valid, err)
		}
		for b := range q {
			var want []int
			for i := 0; i < validLen(valid, b, s); i++ {
				if q[b][i] > 0 {
					want = append(want, i)
				}
			}
			if fmt.Sprint(want) != fmt.Sprint(sel.Rows[b]) && !(len(want) == 0 && len(sel.Rows[b]) == 0) {
				t.Fatalf("%s: SelectCausal row %d: got %v, want the valid positions with score > 0: %v (scores %v, V_b = %d)", impl.Name, b, sel.Rows[b], want, q[b], validLen(valid, b, s))
			}
		}
	}
}

func TestSelection(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			selCount = counters{}
			// 1000 draws (about 20 ms on ref): enough that every counted
			// case below, NaN in padding the rarest at about 2 %, appears
			// in every run.
			for range 10 {
				check(t, selectionProp(impl))
				check(t, causalSelectionProp(impl))
			}
			// The generator must have produced the cases the properties are about.
			for name, n := range map[string]int64{
				"padded batches":                     selCount.padded.Load(),
				"ties across the selection boundary": selCount.boundaryTie.Load(),
				"NaN errors":                         selCount.nanErr.Load(),
				"NaN in padding":                     selCount.nanPadded.Load(),
				"permuted rows of distinct weights":  selCount.permuted.Load(),
				"rows with V_b = 0":                  selCount.zeroRow.Load(),
			} {
				if n == 0 {
					t.Errorf("%s: the generator produced no %s in 1000 draws; the properties about them were not exercised", impl.Name, name)
				}
				t.Logf("%s: %s: %d", impl.Name, name, n)
			}
		})
	}
}

func FuzzSelection(f *testing.F) {
	f.Fuzz(fuzzImpls(selectionProp, Impls))
}

func FuzzCausalSelection(f *testing.F) {
	f.Fuzz(fuzzImpls(causalSelectionProp, Impls))
}
