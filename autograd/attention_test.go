package autograd

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"pgregory.net/rapid"
)

// chainAttention is CausalAttention written as the chain of operations it
// fuses: per sequence, each head's MatMulNT, ConcatRows, MaskedFill(−Inf),
// Softmax, each head's MatMul with v, ConcatCols; then ConcatRows.
func chainAttention(tp *Tape, q, k, v *Tensor, heads int, pos [][]int, window int) *Tensor {
	total := q.Rows / heads
	var seqs []*Tensor
	off := 0
	for _, p := range pos {
		m := len(p)
		if m == 0 {
			continue
		}
		var parts []*Tensor
		for hd := 0; hd < heads; hd++ {
			r := hd*total + off
			parts = append(parts, tp.MatMulNT(tp.SliceRows(q, r, r+m), tp.SliceRows(k, r, r+m)))
		}
		mask := make([]bool, heads*m*m)
		for hd := 0; hd < heads; hd++ {
			for i, pi := range p {
				for j, pj := range p {
					mask[hd*m*m+i*m+j] = pj > pi || (window > 0 && pi-pj >= window)
				}
			}
		}
		probs := tp.Softmax(tp.MaskedFill(tp.ConcatRows(parts...), mask, float32(math.Inf(-1))))
		parts = parts[:0]
		for hd := 0; hd < heads; hd++ {
			r := hd*total + off
			parts = append(parts, tp.MatMul(tp.SliceRows(probs, hd*m, (hd+1)*m), tp.SliceRows(v, r, r+m)))
		}
		seqs = append(seqs, tp.ConcatCols(parts...))
		off += m
	}
	return tp.ConcatRows(seqs...)
}

// TestCausalAttentionIsTheChain checks that CausalAttention's values and
// gradients are those of the chain it replaces, exactly (== on every
// element), for rapid-drawn heads, head widths, sequences (empty ones
// included), position subsets and windows.
func TestCausalAttentionIsTheChain(t *testing.T) {
	// The heads run on up to GOMAXPROCS goroutines; the chain does not.
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs)
	rapid.Check(t, func(rt *rapid.T) {
		runtime.GOMAXPROCS(rapid.SampledFrom([]int{1, 2, 4}).Draw(rt, "GOMAXPROCS"))
		heads := rapid.IntRange(1, 3).Draw(rt, "heads")
		dh := rapid.SampledFrom([]int{2, 4, 8, 10}).Draw(rt, "dh")
		window := rapid.SampledFrom([]int{0, 0, 1, 3}).Draw(rt, "window")
		nseq := rapid.IntRange(1, 3).Draw(rt, "sequences")
		var pos [][]int
		total := 0
		for b := 0; b < nseq; b++ {
			var p []int
			for i := 0; i < 40; i++ {
				if rapid.Bool().Draw(rt, "keep") {
					p = append(p, i)
				}
			}
			pos = append(pos, p)
			total += len(p)
		}
		if total == 0 {
			pos[0], total = []int{7}, 1
		}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 3))
		scale := rapid.SampledFrom([]float64{1, 10}).Draw(rt, "scale")
		vals := func() []float32 {
			d := make([]float32, heads*total*dh)
			for i := range d {
				d[i] = float32(scale * rng.NormFloat64())
			}
			return d
		}
		qd, kd, vd := vals(), vals(), vals()
		up := vals()[:total*heads*dh]
		run := func(f func(tp *Tape, q, k, v *Tensor, heads int, pos [][]int, window int) *Tensor) [4][]float32 {
			q := NewParam(heads*total, dh, append([]float32(nil), qd...))
			k := NewParam(heads*total, dh, append([]float32(nil), kd...))
			v := NewParam(heads*total, dh, append([]float32(nil), vd...))
			var tp Tape
			out := f(&tp, q, k, v, heads, pos, window)
			tp.BackwardFrom(out, up)
			return [4][]float32{out.Data, q.Grad, k.Grad, v.Grad}
		}
		got, want := run((*Tape).CausalAttention), run(chainAttention)
		for n, name := range []string{"output", "dq", "dk", "dv"} {
			for i := range want[n] {
				if got[n][i] != want[n][i] {
					rt.Fatalf("%s[%d]: fused %v, chain %v", name, i, got[n][i], want[n][i])
				}
			}
		}
	})
}

// chainRotateHalf is RotateHalf written as the chain of operations it fuses.
func chainRotateHalf(tp *Tape, x, cos, sin *Tensor, pos []int) *Tensor {
	n, dh := len(pos), x.Cols
	heads, half := x.Rows/n, dh/2
	c := tp.Reshape(tp.GatherRows(cos, pos), 1, n*dh)
	s := tp.Reshape(tp.GatherRows(sin, pos), 1, n*dh)
	swapped := tp.ConcatCols(tp.SliceCols(x, half, dh), tp.SliceCols(x, 0, half))
	y := tp.Add(tp.Mul(tp.Reshape(x, heads, n*dh), c), tp.Mul(tp.Reshape(swapped, heads, n*dh), s))
	return tp.Reshape(y, heads*n, dh)
}

// TestRotateHalfIsTheChain checks RotateHalf's values and gradient against
// the chain it replaces, exactly, on rapid-drawn shapes, positions and
// tables, with a gradient already present in x.
func TestRotateHalfIsTheChain(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		heads := rapid.IntRange(1, 3).Draw(rt, "heads")
		dh := 2 * rapid.IntRange(1, 6).Draw(rt, "half")
		rows := rapid.IntRange(1, 9).Draw(rt, "table rows")
		pos := rapid.SliceOfN(rapid.IntRange(0, rows-1), 1, 12).Draw(rt, "pos")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 5))
		vals := func(n int) []float32 {
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(rng.NormFloat64())
			}
			return d
		}
		cos, sin := New(rows, dh, vals(rows*dh)), New(rows, dh, vals(rows*dh))
		xd, up, g0 := vals(heads*len(pos)*dh), vals(heads*len(pos)*dh), vals(heads*len(pos)*dh)
		run := func(f func(tp *Tape, x, cos, sin *Tensor, pos []int) *Tensor) [2][]float32 {
			x := NewParam(heads*len(pos), dh, append([]float32(nil), xd...))
			copy(x.Grad, g0)
			var tp Tape
			out := f(&tp, x, cos, sin, pos)
			tp.BackwardFrom(out, up)
			return [2][]float32{out.Data, x.Grad}
		}
		got, want := run((*Tape).RotateHalf), run(chainRotateHalf)
		for n, name := range []string{"output", "dx"} {
			for i := range want[n] {
				if got[n][i] != want[n][i] {
					rt.Fatalf("%s[%d]: fused %v, chain %v", name, i, got[n][i], want[n][i])
				}
			}
		}
	})
}
