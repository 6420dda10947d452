package autograd

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
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
	defer func(b int) { attentionBlock = b }(attentionBlock)
	rapid.Check(t, func(rt *rapid.T) {
		runtime.GOMAXPROCS(rapid.SampledFrom([]int{1, 2, 4}).Draw(rt, "GOMAXPROCS"))
		attentionBlock = rapid.SampledFrom([]int{1, 3, 8, 64}).Draw(rt, "block")
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

// attentionCase is one comparison of CausalAttention with chainAttention.
type attentionCase struct {
	heads, dh, window int
	pos               [][]int
	// spoil changes the inputs (q, k, v, upstream gradient) after they are
	// drawn, or is nil.
	spoil func(q, k, v, up []float32)
}

// compareAttention runs CausalAttention, forward and backward, with blocks
// of block queries, and again with one block for the whole sequence (every
// query times every key: the kernel calls of the version before the blocks,
// a row's scores over all m keys in m×m products), again so with every
// row's exponentials and sums over all m keys (visibleOnly off) and, if chain, as
// chainAttention, on c with normally distributed inputs (times scale) and
// gradients already present in q, k and v. It reports the first element of
// the output or a gradient whose bits differ, a NaN only matching a NaN.
func compareAttention(t *testing.T, c attentionCase, scale float64, seed uint64, block int, chain bool) {
	t.Helper()
	defer func(b int, v bool) { attentionBlock, visibleOnly = b, v }(attentionBlock, visibleOnly)
	total := 0
	for _, p := range c.pos {
		total += len(p)
	}
	n := c.heads * total * c.dh
	rng := rand.New(rand.NewPCG(seed, 11))
	vals := func() []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(scale * rng.NormFloat64())
		}
		return d
	}
	qd, kd, vd, up := vals(), vals(), vals(), vals()
	g0 := [3][]float32{vals(), vals(), vals()}
	if c.spoil != nil {
		c.spoil(qd, kd, vd, up)
	}
	run := func(f func(tp *Tape, q, k, v *Tensor, heads int, pos [][]int, window int) *Tensor, block int, visible bool) [4][]float32 {
		attentionBlock, visibleOnly = block, visible
		var in [3]*Tensor
		for x, d := range [3][]float32{qd, kd, vd} {
			in[x] = NewParam(c.heads*total, c.dh, append([]float32(nil), d...))
			copy(in[x].Grad, g0[x])
		}
		var tp Tape
		out := f(&tp, in[0], in[1], in[2], c.heads, c.pos, c.window)
		tp.BackwardFrom(out, up)
		return [4][]float32{out.Data, in[0].Grad, in[1].Grad, in[2].Grad}
	}
	got := run((*Tape).CausalAttention, block, true)
	refs := map[string][4][]float32{
		"unblocked": run((*Tape).CausalAttention, math.MaxInt, true),
		"every key": run((*Tape).CausalAttention, math.MaxInt, false),
	}
	if chain {
		refs["chain"] = run(chainAttention, block, true)
	}
	for ref, want := range refs {
		for x, name := range []string{"output", "dq", "dk", "dv"} {
			for i := range want[x] {
				g, w := got[x][i], want[x][i]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%d heads, dh %d, window %d, block %d, first sequence of %d: %s[%d]: blocked %v (%#08x), %s %v (%#08x)",
						c.heads, c.dh, c.window, block, len(c.pos[0]), name, i, g, math.Float32bits(g), ref, w, math.Float32bits(w))
				}
			}
		}
	}
}

// TestCausalAttentionBlocksAreTheChain checks that CausalAttention, which
// leaves out the keys a block of queries cannot see, has the bits of the
// chain that computes every score: for sequences shorter than a block, of
// a block, and not a multiple of it, windows shorter and longer than a
// block, one and several heads, positions with gaps and repeats, several
// sequences, values and gradients (bits compared, the sign of a zero
// included).
func TestCausalAttentionBlocksAreTheChain(t *testing.T) {
	iota := func(n, step int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i * step
		}
		return p
	}
	repeats := []int{0, 1, 1, 2, 5, 5, 5, 6, 9, 9, 10, 14, 15, 15, 20}
	blocks, windows := []int{64, 16, 7}, []int{0, 1, 10, 100}
	if testing.Short() {
		// The sweep takes 4-5 minutes under qemu (.ci/run's arm64 run, -short):
		// the production block and one dividing no length, no window and one
		// shorter than both blocks.
		blocks, windows = []int{64, 7}, []int{0, 10}
	}
	for _, block := range blocks {
		for _, pos := range [][][]int{
			{iota(1, 1)}, {iota(50, 1)}, {iota(64, 1)}, {iota(65, 1)}, {iota(200, 1)},
			{iota(130, 3)}, {repeats}, {iota(70, 1), iota(33, 2), repeats},
		} {
			for _, window := range windows {
				for _, hd := range [][2]int{{1, 8}, {3, 4}, {2, 64}} {
					c := attentionCase{heads: hd[0], dh: hd[1], window: window, pos: pos}
					compareAttention(t, c, 1, uint64(block*window+len(pos[0])), block, true)
					compareAttention(t, c, 10, uint64(block+window+len(pos[0])), block, true)
				}
			}
		}
	}
}

// TestCausalAttentionBlocksEdges checks CausalAttention in blocks against
// the unblocked computation where leaving out a hidden key's terms would
// not be exact: an infinite value or upstream gradient (0·Inf is NaN), a
// NaN query (its row's probabilities, hidden ones included, are NaN), scores
// that overflow, gradients of scores that overflow, unsorted positions, and
// outputs whose sums underflow to −0 (which the unblocked terms +0·v turn
// into +0 when v > 0).
func TestCausalAttentionBlocksEdges(t *testing.T) {
	const heads, dh = 2, 4
	seq := make([]int, 40)
	for i := range seq {
		seq[i] = i
	}
	shuffled := []int{3, 0, 7, 1, 2, 9, 4, 4, 30, 8, 5, 6, 11, 10, 13, 12, 15, 14, 17, 16}
	row := func(i int) int { return (heads*len(seq) - len(seq) + i) * dh } // head 1, row i
	for _, c := range []struct {
		name  string
		pos   []int
		spoil func(q, k, v, up []float32)
	}{
		{"Inf in a late value", seq, func(q, k, v, up []float32) { v[row(35)+1] = float32(math.Inf(1)) }},
		{"NaN in a late value", seq, func(q, k, v, up []float32) { v[row(30)] = float32(math.NaN()) }},
		{"Inf in an upstream gradient", seq, func(q, k, v, up []float32) { up[3*heads*dh+5] = float32(math.Inf(-1)) }},
		{"NaN in an early query", seq, func(q, k, v, up []float32) { q[row(2)+3] = float32(math.NaN()) }},
		{"Inf in a key", seq, func(q, k, v, up []float32) { k[row(5)] = float32(math.Inf(1)) }},
		{"overflowing scores", seq, func(q, k, v, up []float32) {
			for j := range dh {
				q[row(9)+j], k[row(4)+j] = 1e20, 1e20
			}
		}},
		{"overflowing score gradients", seq, func(q, k, v, up []float32) {
			for j := range dh {
				v[row(39)+j] = 1e30
			}
			for j := range up {
				up[j] *= 1e10
			}
		}},
		{"unsorted positions", shuffled, nil},
		{"underflowing outputs", seq, func(q, k, v, up []float32) {
			// Head 1's queries are 0, so row i's probabilities are all
			// 1/(i+1); column 0 of its values is −2⁻¹⁴⁹ for the first
			// block of keys and +2⁻¹⁴⁹ after it.
			for i := range seq {
				for j := range dh {
					q[row(i)+j] = 0
				}
				v[row(i)] = float32(math.Copysign(0x1p-149, float64(i-8)+0.5))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, window := range []int{0, 6} {
				compareAttention(t, attentionCase{heads: heads, dh: dh, window: window, pos: [][]int{c.pos}, spoil: c.spoil}, 1, 5, 8, false)
			}
		})
	}
}

// TestCausalAttentionVisibleRows checks the rows that CausalAttention
// computes over their visible keys only (forwardRow, backwardRow) against
// every row over all its keys, where that is not exact and the row must
// fall back to all its keys: a query whose visible scores are all −Inf
// (maximum −Inf, so a hidden key's exponential is Exp(−Inf + Inf), NaN),
// one whose visible scores include −Inf beside finite ones (its
// probability +0, the row taken over its visible keys), and rows with NaN
// or +Inf scores; each with and without a window, with blocks of 1, 8 and
// 64 queries, with sorted positions with gaps and repeats.
func TestCausalAttentionVisibleRows(t *testing.T) {
	const heads, dh = 2, 4
	seq := make([]int, 40)
	for i := range seq {
		seq[i] = i + i/3
	}
	seq[7], seq[20] = seq[6], seq[19]                                      // repeats
	row := func(i int) int { return (heads*len(seq) - len(seq) + i) * dh } // head 1, row i
	for _, c := range []struct {
		name  string
		spoil func(q, k, v, up []float32)
	}{
		{"every visible score −Inf", func(q, k, v, up []float32) {
			for j := range dh {
				q[row(9)+j] = 1e20
				for i := 0; i <= 9; i++ {
					k[row(i)+j] = -1e20
				}
			}
		}},
		{"one visible score −Inf", func(q, k, v, up []float32) {
			for j := range dh {
				q[row(12)+j], k[row(10)+j] = 1e20, -1e20
			}
		}},
		{"a NaN score", func(q, k, v, up []float32) { k[row(4)+1] = float32(math.NaN()) }},
		{"a +Inf score", func(q, k, v, up []float32) {
			for j := range dh {
				q[row(30)+j], k[row(29)+j] = 1e20, 1e20
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, window := range []int{0, 6} {
				for _, block := range []int{1, 8, 64} {
					compareAttention(t, attentionCase{heads: heads, dh: dh, window: window, pos: [][]int{seq}, spoil: c.spoil}, 1, 7, block, false)
				}
			}
		})
	}
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

// TestVisibleSpans checks the keys [a, b) that setSequence finds query i
// to see, for sorted positions with gaps and repeats, against the
// definition: key j is visible when p[j] ≤ p[i] and, with a window,
// p[i] − p[j] < window; the visible keys form [a, b), with a ≤ i < b.
func TestVisibleSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 2000; trial++ {
		p := make([]int, 1+rng.IntN(30))
		for i := range p {
			p[i] = rng.IntN(40)
		}
		slices.Sort(p)
		window := rng.IntN(6)
		hw := &headWork{headParams: headParams{window: window}}
		hw.setSequence(p)
		for i := range p {
			a, b := hw.visible(i)
			if a > i || b <= i {
				t.Fatalf("positions %v, window %d: query %d sees [%d, %d)", p, window, i, a, b)
			}
			for j := range p {
				seen := p[j] <= p[i] && (window == 0 || p[i]-p[j] < window)
				if seen != (a <= j && j < b) {
					t.Fatalf("positions %v, window %d: query %d sees [%d, %d), key %d seen: %v", p, window, i, a, b, j, seen)
				}
			}
		}
	}
}
