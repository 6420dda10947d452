package autograd

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/modref/modref/autograd/internal/kernel"
	"github.com/viterin/vek/vek32"
)

// CausalAttention returns the merged heads of causal softmax attention,
// sequence by sequence, in one operation that keeps no score matrix.
//
// q, k and v are (h·T)×dₕ in the layout of SplitHeads (head 0's T rows,
// then head 1's, …), T = Σ len(pos[b]); q is already scaled by 1/√dₕ. The
// rows of sequence b are the next len(pos[b]) rows of each head's block, and
// pos[b] lists their positions. For each sequence and head, row i of the
// result's head columns is Σⱼ pᵢⱼ vⱼ with pᵢⱼ = softmax over j of qᵢ·kⱼ,
// where key j is hidden (pᵢⱼ = 0) when pos[b][j] > pos[b][i] or, with
// window > 0, pos[b][i] − pos[b][j] ≥ window. The result is T×(h·dₕ), as
// MergeHeads would lay it out.
//
// It computes exactly what MatMulNT, MaskedFill(−Inf), Softmax, MatMul and
// ConcatCols compute, with the same kernels and the same float64 softmax,
// so the forward values have the same bits as that chain. The backward pass
// recomputes each head's scores and probabilities from q, k and the
// softmax's row maxima and sums (kept in float64), so that the tape holds
// O(T·h) numbers for the scores instead of O(h·Σ len(pos[b])²) values and
// gradients. It works on blocks of attentionBlock queries (and keys) and
// leaves out the keys a block cannot see, whose terms the chain adds as
// exact zeros; see skipsExact for when it does. pos is copied.
func (tp *Tape) CausalAttention(q, k, v *Tensor, heads int, pos [][]int, window int) *Tensor {
	total := 0
	for _, p := range pos {
		total += len(p)
	}
	dh := q.Cols
	if heads <= 0 || total == 0 || q.Rows != heads*total || k.Rows != q.Rows || v.Rows != q.Rows ||
		k.Cols != dh || v.Cols != dh || window < 0 {
		panic(fmt.Sprintf("autograd.CausalAttention: q %s, k %s, v %s, %d heads, %d positions, window %d: want three (heads·%d)x dh tensors and window ≥ 0",
			q.shape(), k.shape(), v.shape(), heads, total, window, total))
	}
	q, k, v = tp.operand(q), tp.operand(k), tp.operand(v)
	out := tp.alloc(total, heads*dh, needsGrad(q, k, v))
	var nd *node
	if out.Grad != nil {
		nd = tp.push(opCausalAttention, out, q, k)
		nd.list = append(nd.list, v)
		nd.arg = heads
		// idx holds window, then each sequence's length and positions.
		nd.idx = append(nd.idx, window)
		for _, p := range pos {
			nd.idx = append(nd.idx, len(p))
			nd.idx = append(nd.idx, p...)
		}
	}
	hw := tp.headWork()
	hw.headParams = headParams{q: q, k: k, v: v, out: out, heads: heads, total: total, dh: dh, window: window, path: tp.kernels()}
	stats := 0 // where the current sequence's row statistics start in nd.saved
	for _, p := range pos {
		m := len(p)
		if m == 0 {
			continue
		}
		hw.vals = nil
		if nd != nil {
			nd.saved = slices.Grow(nd.saved, 2*heads*m)[:stats+2*heads*m]
			hw.vals = nd.saved[stats:]
			stats += 2 * heads * m
		}
		w := workers(heads)
		hw.setSequence(p)
		hw.buf, hw.e = tp.f32(w*hw.forwardSize()), tp.f64(w*m)
		hw.runOn(w)
		hw.off += m
	}
	hw.headParams = headParams{}
	return tp.result(out)
}

// attentionBlock is how many queries (and, in the backward pass, keys)
// CausalAttention takes at a time: each block of queries is multiplied only
// with the keys its queries can see, each block of keys only with the
// queries that see it. It changes the work, never the bits (tests set other
// sizes to check that).
var attentionBlock = 64

// visibleOnly makes CausalAttention compute each row's exponentials and
// sums over the keys its query sees (forwardRow, backwardRow, the sum of
// dS) when the positions are sorted. It changes the work, never the bits:
// tests turn it off to compare with every row computed over all its keys.
var visibleOnly = true

// headWork is the per-sequence work of CausalAttention's forward or backward
// pass, shared out head by head among goroutines. A tape keeps one and
// reuses it, so that sharing the work allocates nothing.
type headWork struct {
	headParams
	next, joined atomic.Int64
	wg           sync.WaitGroup
	// spans holds, for sorted positions, the keys [spans[2i], spans[2i+1])
	// that query i of the sequence sees (see visible).
	spans []int
}

// headParams describes the work of a headWork.
type headParams struct {
	backward     bool
	q, k, v, out *Tensor
	heads, total int // heads and rows per head
	dh, window   int
	p            []int // the sequence's positions
	sorted       bool  // whether p never decreases
	bs           int   // the block size, at most m
	off, m       int   // its first row in each head's block and its length
	buf          []float32
	path         kernel.Path // the products' kernels (Rounding.Portable)
	e            []float64   // a row of exponentials per goroutine
	vals         []float64   // row maxima and sums, two per row of each head
}

// setSequence makes p, a sequence of positions, the one to compute.
func (hw *headWork) setSequence(p []int) {
	hw.p, hw.m = p, len(p)
	hw.sorted = slices.IsSorted(p)
	hw.bs = min(len(p), attentionBlock)
	if !hw.sorted {
		return
	}
	// Both ends only move forward from one query to the next.
	hw.spans = slices.Grow(hw.spans[:0], 2*len(p))[:2*len(p)]
	a, b := 0, 0
	for i, pi := range p {
		for hw.window > 0 && pi-p[a] >= hw.window {
			a++
		}
		for b = max(b, i+1); b < len(p) && p[b] <= pi; b++ {
		}
		hw.spans[2*i], hw.spans[2*i+1] = a, b
	}
}

// forwardSize is the float32 scratch one goroutine needs for a forward
// head: a block's scores and its rows of output.
func (hp *headParams) forwardSize() int { return hp.bs*hp.m + hp.bs*hp.dh }

// backwardSize is the float32 scratch one goroutine needs for a backward
// head: the probabilities and score gradients of the whole head, stored
// block of keys after block of keys (so that each block's columns are one
// matrix), a block's rows of both, the head's output gradient and query
// gradient, and one block of a gradient.
func (hp *headParams) backwardSize() int {
	return 2*hp.m*hp.m + 2*hp.bs*hp.m + 2*hp.m*hp.dh + hp.bs*hp.dh
}

// keys returns the keys [lo, hi) that the queries [i0, i1) can see at
// least one of, or all keys when the positions are not sorted.
func (hp *headParams) keys(i0, i1 int) (lo, hi int) {
	p := hp.p
	if !hp.sorted {
		return 0, hp.m
	}
	if hp.window > 0 {
		lo = firstAtLeast(p, 0, p[i0]-hp.window+1)
	}
	return lo, firstAtLeast(p, i1, p[i1-1]+1)
}

// queries returns the queries [lo, hi) from the first that sees one of the
// keys [j0, j1) to the last, or all queries when the positions are not
// sorted. A query in between may see none of them (with a window, keys
// can be a window apart), but the keys its block of queries sees,
// rounded out to whole blocks of keys, include [j0, j1): its block's first
// query sees no later than j1−1 and its last no earlier than j0.
func (hp *headParams) queries(j0, j1 int) (lo, hi int) {
	p := hp.p
	if !hp.sorted {
		return 0, hp.m
	}
	hi = hp.m
	if hp.window > 0 {
		hi = firstAtLeast(p, j1, p[j1-1]+hp.window)
	}
	return firstAtLeast(p, 0, p[j0]), hi
}

// firstAtLeast returns the first index from `from` on of sorted p whose
// position is at least x, or len(p).
func firstAtLeast(p []int, from, x int) int {
	lo, hi := from, len(p)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// headWork returns the tape's reusable headWork.
func (tp *Tape) headWork() *headWork {
	if tp.heads == nil {
		tp.heads = new(headWork)
	}
	return tp.heads
}

// workers returns how many goroutines share the heads of an attention
// operation: one per head up to GOMAXPROCS.
func workers(heads int) int { return max(1, min(heads, runtime.GOMAXPROCS(0))) }

// headQueue hands headWork to a fixed pool of runtime.NumCPU()-1 goroutines,
// started on first use.
var (
	headQueue     chan *headWork
	startHeadPool sync.Once
)

// runOn computes every head once, on the calling goroutine and up to w-1
// pool goroutines, and returns when all are done. Each goroutine that joins
// gets its own index below w for its scratch space; every head is computed
// by the same operations whichever goroutine runs it, so the results do not
// depend on w.
func (hw *headWork) runOn(w int) {
	hw.next.Store(0)
	hw.joined.Store(0)
	if w > 1 {
		startHeadPool.Do(func() {
			n := runtime.NumCPU() - 1
			headQueue = make(chan *headWork, max(n, 1))
			for range n {
				go func() {
					for hw := range headQueue {
						hw.run()
						hw.wg.Done()
					}
				}()
			}
		})
		for range w - 1 {
			hw.wg.Add(1)
			select {
			case headQueue <- hw:
			default: // every pool goroutine is busy: the caller does more itself
				hw.wg.Done()
			}
		}
	}
	hw.run()
	hw.wg.Wait()
}

// run takes heads until none is left.
func (hw *headWork) run() {
	wk := int(hw.joined.Add(1) - 1)
	for hd := int(hw.next.Add(1) - 1); hd < hw.heads; hd = int(hw.next.Add(1) - 1) {
		if hw.backward {
			hw.backwardHead(hd, wk)
		} else {
			hw.forwardHead(hd, wk)
		}
	}
}

// forwardHead computes head hd's probabilities, row statistics and output,
// a block of queries at a time.
//
// The chain multiplies each row of probabilities by all m values; the block
// multiplies only by the values of the keys it can see. A probability of a
// hidden key is exp(−Inf)/sum = +0, and a kernel's chain of multiply-adds
// is unchanged by a zero term at its start (where it is +0, and
// +0 + ±0 = +0) and by one at its end (chainZeroSigns mends the one
// exception), provided the value is finite (0·Inf is NaN): a head with a
// value that is not takes every key. A row whose sum is NaN has NaN
// probabilities, hidden ones too, and so a NaN output row either way. The
// row maxima and sums are the same over the visible keys as over all (a
// hidden score is −Inf: never the maximum, and its exponential adds +0).
func (hw *headWork) forwardHead(hd, wk int) {
	m, dh, heads, bs := hw.m, hw.dh, hw.heads, hw.bs
	size := hw.forwardSize()
	b := hw.buf[wk*size : (wk+1)*size]
	ew := hw.e[wk*m : (wk+1)*m]
	r := (hd*hw.total + hw.off) * dh
	qh, kh, vh := hw.q.Data[r:r+m*dh], hw.k.Data[r:r+m*dh], hw.v.Data[r:r+m*dh]
	skip := hw.sorted && finite(vh)
	for i0 := 0; i0 < m; i0 += bs {
		i1 := min(i0+bs, m)
		n := i1 - i0
		lo, hi := 0, m
		if skip {
			lo, hi = hw.keys(i0, i1)
		}
		w := hi - lo
		probs, head := b[:n*w], b[bs*m:][:n*dh]
		hw.path.MatMulNT(probs, qh[i0*dh:i1*dh], kh[lo*dh:hi*dh], n, dh, w)
		for i := i0; i < i1; i++ {
			mx, sum := hw.forwardRow(probs[(i-i0)*w:(i-i0+1)*w], ew, lo, i)
			if hw.vals != nil {
				hw.vals[2*(hd*m+i)], hw.vals[2*(hd*m+i)+1] = mx, sum
			}
		}
		hw.path.MatMulNN(head, probs, vh[lo*dh:hi*dh], n, w, dh)
		chainZeroSigns(head, vh[hi*dh:], dh)
		for i := i0; i < i1; i++ {
			copy(hw.out.Data[(hw.off+i)*heads*dh+hd*dh:][:dh], head[(i-i0)*dh:(i-i0+1)*dh])
		}
	}
}

// chainZeroSigns gives the zeros in head (rows of a block's output, dₕ
// wide) the sign the chain gives them. The chain goes on past the block's
// last key with terms +0·vⱼ (rest holds those vⱼ), which leave a nonzero
// sum as it is but turn a −0 (a sum that underflowed) into +0 unless the
// sign bit of every vⱼ in its column is set.
func chainZeroSigns(head, rest []float32, dh int) {
	if len(rest) == 0 {
		return
	}
	for i, x := range head {
		if x != 0 || !math.Signbit(float64(x)) {
			continue
		}
		for j := i % dh; j < len(rest); j += dh {
			if !math.Signbit(float64(rest[j])) {
				head[i] = 0
				break
			}
		}
	}
}

// visible returns the keys [a, b) that query i sees when the positions are
// sorted: those at positions p[i]−window < p[j] ≤ p[i] (p[j] ≤ p[i] without
// a window). Query i sees key i, so a ≤ i < b.
func (hw *headWork) visible(i int) (a, b int) { return hw.spans[2*i], hw.spans[2*i+1] }

// hiddenZero reports whether a row with softmax maximum mx and sum sum
// gives its hidden keys the probability +0, as it does unless the sum is
// NaN: a hidden score is −Inf, and mx is never NaN (kernel.Max leaves NaNs
// out), so its exponential is Exp(−Inf − mx) = +0 unless mx = −Inf; then
// every visible score is −Inf or NaN (query i sees at least key i), the
// visible exponentials are NaN and so is the sum. Otherwise the visible
// maximum's exponential is 1, the sum is at least 1, and +0/sum = +0.
func hiddenZero(mx, sum float64) bool { return sum == sum && !math.IsInf(mx, -1) }

// forwardRow turns row, query i's scores with the keys [lo, lo+len(row)),
// into its probabilities, as the chain's Softmax does after MaskedFill, and
// returns the row's maximum and sum of exponentials; e holds at least
// len(row) values. With sorted positions it takes the exponentials, maximum
// and sum of the span of keys visibleSpan returns only and sets the other
// probabilities to +0: the same bits, since a hidden score (−Inf) is never
// the maximum and its exponential, +0, leaves the in-order sum as it is
// (which starts at +0 and so is never −0); a row whose hidden
// probabilities are not +0 (hiddenZero) is computed over all its keys.
func (hw *headWork) forwardRow(row []float32, e []float64, lo, i int) (mx, sum float64) {
	if hw.sorted && visibleOnly {
		a, b := hw.visibleSpan(row, lo, i)
		mx, sum = rowExpSum(row[a:b], e[:b-a])
		if hiddenZero(mx, sum) {
			kernel.DivToFloat32(row[a:b], e, sum)
			clear(row[:a])
			clear(row[b:])
			return mx, sum
		}
	}
	hw.hide(row, lo, i)
	mx, sum = rowExpSum(row, e[:len(row)])
	kernel.DivToFloat32(row, e, sum)
	return mx, sum
}

// backwardRow recomputes query i's probabilities from its scores in row
// (keys [lo, lo+len(row))) and its maximum mx and sum, as forwardRow
// computed them, with the same bits.
func (hw *headWork) backwardRow(row []float32, e []float64, lo, i int, mx, sum float64) {
	if hw.sorted && visibleOnly && hiddenZero(mx, sum) {
		a, b := hw.visibleSpan(row, lo, i)
		kernel.ExpShifted(e, row[a:b], mx)
		kernel.DivToFloat32(row[a:b], e, sum)
		clear(row[:a])
		clear(row[b:])
		return
	}
	hw.hide(row, lo, i)
	kernel.ExpShifted(e, row, mx)
	kernel.DivToFloat32(row, e, sum)
}

// rowVector is a multiple of the count of values the row kernels
// kernel.ExpShifted, ExpShiftedSum and DivToFloat32 take at a time on every
// path (8 float64 lanes on AVX-512, 4 on AVX2), so that a span of a
// multiple of rowVector keys leaves no exponential to their scalar loops
// (kernel.Max takes twice as many at a time, and leaves at most 8 values
// to its loop of comparisons).
const rowVector = 8

// visibleSpan returns the span [a, b) of row, query i's scores with the
// keys [lo, lo+len(row)) for sorted positions, that forwardRow and
// backwardRow compute: the keys the query sees, widened to a multiple of
// rowVector keys (or the whole row), the hidden keys it takes in set to
// −Inf, the others left as they are.
func (hw *headWork) visibleSpan(row []float32, lo, i int) (a, b int) {
	va, vb := hw.visible(i)
	va, vb = va-lo, vb-lo
	n := min(len(row), (vb-va+rowVector-1)/rowVector*rowVector)
	b = min(len(row), va+n)
	a = b - n
	ninf := float32(math.Inf(-1))
	fill(row[a:va], ninf)
	fill(row[vb:b], ninf)
	return a, b
}

// hide sets to −Inf the scores in row, of the keys [lo, lo+len(row)), that
// query i may not see: with sorted positions (and visibleOnly) the keys
// before and after those visible returns, each a run of the row (perhaps
// empty); otherwise every key whose position is later than the query's or
// a window or more earlier, found by comparing positions.
func (hw *headWork) hide(row []float32, lo, i int) {
	ninf := float32(math.Inf(-1))
	if hw.sorted && visibleOnly {
		a, b := hw.visible(i)
		fill(row[:a-lo], ninf)
		fill(row[b-lo:], ninf)
		return
	}
	pi, window := hw.p[i], hw.window
	for j, pj := range hw.p[lo : lo+len(row)] {
		if pj > pi || (window > 0 && pi-pj >= window) {
			row[j] = ninf
		}
	}
}

// fill sets every element of x to v.
func fill(x []float32, v float32) {
	for j := range x {
		x[j] = v
	}
}

// finite reports whether every element of x is finite.
func finite(x []float32) bool { return largest(x) <= math.MaxFloat32 }

// largest returns the largest |x_i|, or +Inf if any x_i is not finite.
// It takes the largest of the bits of |x_i| as integers
// (kernel.MaxAbsBits), which order non-negative floats as their values do
// and put every NaN above +Inf.
func largest(x []float32) float64 {
	mx := kernel.MaxAbsBits(x)
	if mx > 0x7f800000 {
		return math.Inf(1)
	}
	return float64(math.Float32frombits(mx))
}

// backwardCausalAttention recomputes each head's probabilities P and adds
// dV = Pᵀ·dO, dQ = dS·K and dK = dSᵀ·Q, with dS = P ⊙ (dP − rowsum(dP ⊙ P))
// and dP = dO·Vᵀ, as the backward passes of the equivalent chain do.
func (tp *Tape) backwardCausalAttention(nd *node) {
	q, k, v := nd.a, nd.b, nd.list[0]
	heads, dh := nd.arg, q.Cols
	total := q.Rows / heads
	window := nd.idx[0]
	rest := nd.idx[1:]
	stats := nd.saved
	hw := tp.headWork()
	hw.headParams = headParams{backward: true, q: q, k: k, v: v, out: nd.out, heads: heads, total: total, dh: dh, window: window, path: tp.kernels()}
	for len(rest) > 0 {
		m := rest[0]
		hw.setSequence(rest[1 : 1+m])
		rest = rest[1+m:]
		hw.vals = stats[:2*heads*m]
		stats = stats[2*heads*m:]
		w := workers(heads)
		hw.buf, hw.e = tp.f32(w*hw.backwardSize()), tp.f64(w*m)
		hw.runOn(w)
		hw.off += m
	}
	hw.headParams = headParams{}
}

// skipsExact reports whether the backward pass of a head may leave out the
// terms of hidden (query, key) pairs and still have the chain's bits: when
// every row's maximum is finite and its sum is not NaN (so a hidden
// probability is +0), q and k are finite (so are the factors of a hidden
// term of dQ and dK), and |dO|·|V|·dₕ ≤ 2¹⁰⁰ (so every dP, each row's
// rowsum(dP ⊙ P) and dV's factors are finite, and a hidden dS is ±0).
// A left-out term is then an exact zero, at the start of its chain (+0
// stays +0) or at its end (a nonzero sum stays the same; a zero gradient
// part may change its sign only if its chain underflowed to −0, and adding
// it to the gradient, never −0, gives the same bits either way).
func skipsExact(qh, kh, vh, dout []float32, stats []float64, dh int) bool {
	for i := 0; i < len(stats); i += 2 {
		if math.IsInf(stats[i], 0) || math.IsNaN(stats[i+1]) {
			return false
		}
	}
	return finite(qh) && finite(kh) && largest(dout)*largest(vh)*float64(dh) <= 0x1p100
}

// backwardHead adds head hd's gradients into q, k and v. A block of
// queries at a time, it recomputes P and dS over the keys the block sees
// and computes its rows of dQ; then, a block of keys at a time, dV and dK
// from the queries that see the block. The gradients are added in the
// chain's order (dV, dQ, dK), which matters when q, k and v share one.
func (hw *headWork) backwardHead(hd, wk int) {
	m, dh, heads, bs := hw.m, hw.dh, hw.heads, hw.bs
	q, k, v, g := hw.q, hw.k, hw.v, hw.out.Grad
	size := hw.backwardSize()
	b := hw.buf[wk*size : (wk+1)*size]
	ew := hw.e[wk*m : (wk+1)*m]
	pPanels, sPanels, b := b[:m*m], b[m*m:2*m*m], b[2*m*m:]
	rowP, rowS, b := b[:bs*m], b[bs*m:2*bs*m], b[2*bs*m:]
	dout, dq, tmp := b[:m*dh], b[m*dh:2*m*dh], b[2*m*dh:]
	r := (hd*hw.total + hw.off) * dh
	qh, kh, vh := q.Data[r:r+m*dh], k.Data[r:r+m*dh], v.Data[r:r+m*dh]
	for i := 0; i < m; i++ {
		copy(dout[i*dh:(i+1)*dh], g[(hw.off+i)*heads*dh+hd*dh:][:dh])
	}
	stats := hw.vals[2*hd*m : 2*(hd+1)*m]
	skip := hw.sorted && skipsExact(qh, kh, vh, dout, stats, dh)
	needS := q.Grad != nil || k.Grad != nil
	for i0 := 0; i0 < m; i0 += bs {
		i1 := min(i0+bs, m)
		n := i1 - i0
		lo, hi := 0, m
		if skip {
			// Whole blocks of keys, so that each block of keys' columns
			// is filled for every query that queries(…) returns for it.
			lo, hi = hw.keys(i0, i1)
			lo, hi = lo/bs*bs, min(m, (hi+bs-1)/bs*bs)
		}
		w := hi - lo
		probs := rowP[:n*w]
		hw.path.MatMulNT(probs, qh[i0*dh:i1*dh], kh[lo*dh:hi*dh], n, dh, w)
		for i := i0; i < i1; i++ {
			hw.backwardRow(probs[(i-i0)*w:(i-i0+1)*w], ew, lo, i, stats[2*i], stats[2*i+1])
		}
		if v.Grad != nil {
			toPanels(pPanels, probs, m, bs, i0, i1, lo, hi)
		}
		if !needS {
			continue
		}
		dp := rowS[:n*w]
		hw.path.MatMulNT(dp, dout[i0*dh:i1*dh], vh[lo*dh:hi*dh], n, dh, w)
		hw.scoreGrads(probs, dp, n, w, i0, lo, skip && visibleOnly)
		if q.Grad != nil {
			hw.path.MatMulNN(dq[i0*dh:i1*dh], dp, kh[lo*dh:hi*dh], n, w, dh)
		}
		if k.Grad != nil {
			toPanels(sPanels, dp, m, bs, i0, i1, lo, hi)
		}
	}
	if v.Grad != nil {
		hw.keyBlocks(v.Grad[r:r+m*dh], pPanels, dout, tmp, skip)
	}
	if q.Grad != nil {
		vek32.Add_Inplace(q.Grad[r:r+m*dh], dq)
	}
	if k.Grad != nil {
		hw.keyBlocks(k.Grad[r:r+m*dh], sPanels, qh, tmp, skip)
	}
}

// scoreGrads turns dp, the n×w block of dP = dO·Vᵀ of the queries
// [i0, i0+n) and the keys [lo, lo+w), into dS = P ⊙ (dP − rowsum(dP ⊙ P)),
// P being probs, with the bits of the chain's Softmax backward: each row's
// sum in float64, added in order of keys from +0. It takes four rows at a
// time, their sums side by side (four independent chains of additions
// instead of one). With visible (sorted positions and skipsExact), a group
// of rows' sums cover only the span of keys its rows see, from the first
// row's first to the last row's last, its dS that span rounded out to
// whole vectors (kernel.ScaleShifted), and its other dS are +0: a
// left-out term of a sum is +0·dP, dP finite, so ±0, which leaves the sum
// (from +0, so never −0) as it is, and a left-out dS, ±0 (+0·(dP − s),
// both finite), is as a term of dQ and dK an exact zero whose sign does not
// matter either (see skipsExact).
func (hw *headWork) scoreGrads(probs, dp []float32, n, w, i0, lo int, visible bool) {
	var s [4]float64
	for i := 0; i < n; i += 4 {
		r := min(4, n-i)
		a, b := 0, w
		if visible {
			a, _ = hw.visible(i0 + i)
			_, b = hw.visible(i0 + i + r - 1)
			a, b = a-lo, b-lo
		}
		if r == 4 {
			s = rowDots4(probs[i*w:(i+4)*w], dp[i*w:(i+4)*w], w, a, b)
		} else {
			for x := range r {
				s[x] = rowDot(probs[(i+x)*w+a:(i+x)*w+b], dp[(i+x)*w+a:(i+x)*w+b])
			}
		}
		if visible {
			// Rounded out to whole vectors of kernel.ScaleShifted: a dS
			// of a hidden key is ±0 either way.
			n := min(w, (b-a+rowVector-1)/rowVector*rowVector)
			b = min(w, a+n)
			a = b - n
		}
		for x := range r {
			yi, gi := probs[(i+x)*w+a:(i+x)*w+b], dp[(i+x)*w:(i+x+1)*w]
			if visible {
				// No NaN here (see skipsExact): the kernel's bits.
				kernel.ScaleShifted(gi[a:b], yi, s[x])
			} else {
				gv := gi[a:][:len(yi)]
				for j, y := range yi {
					gv[j] = float32(float64(y) * (float64(gv[j]) - s[x]))
				}
			}
			clear(gi[:a])
			clear(gi[b:])
		}
	}
}

// rowDot returns Σⱼ float64(g[j])·float64(y[j]), added in order of j from
// +0 (each product exact in float64).
func rowDot(y, g []float32) float64 {
	g = g[:len(y)]
	var s float64
	for j, x := range y {
		s += float64(float64(g[j]) * float64(x))
	}
	return s
}

// rowDots4 returns rowDot of the columns [a, b) of four rows of y and g,
// the rows w apart: what four calls of rowDot return, their additions
// interleaved.
func rowDots4(y, g []float32, w, a, b int) (s [4]float64) {
	y0 := y[a:b]
	n := len(y0)
	y1, y2, y3 := y[w+a:][:n], y[2*w+a:][:n], y[3*w+a:][:n]
	g0, g1, g2, g3 := g[a:][:n], g[w+a:][:n], g[2*w+a:][:n], g[3*w+a:][:n]
	var s0, s1, s2, s3 float64
	for j, x := range y0 {
		s0 += float64(float64(g0[j]) * float64(x))
		s1 += float64(float64(g1[j]) * float64(y1[j]))
		s2 += float64(float64(g2[j]) * float64(y2[j]))
		s3 += float64(float64(g3[j]) * float64(y3[j]))
	}
	return [4]float64{s0, s1, s2, s3}
}

// toPanels copies rows [i0, i1) of a matrix, their columns [lo, hi) held
// in rows (hi−lo wide), into panels: the m×m matrix stored a block of bs
// columns after another, each block's m rows bs wide (the last block
// narrower). lo and hi are multiples of bs or m.
func toPanels(panels, rows []float32, m, bs, i0, i1, lo, hi int) {
	w := hi - lo
	for j0 := lo; j0 < hi; j0 += bs {
		bw := min(bs, m-j0)
		panel := panels[j0*m : j0*m+m*bw]
		copyBlock(panel[i0*bw:], bw, rows[j0-lo:], w, i1-i0)
	}
}

// copyBlock copies n rows of w values from src (rows stride apart) to dst
// (rows w apart).
func copyBlock(dst []float32, w int, src []float32, stride, n int) {
	for i := 0; i < n; i++ {
		copy(dst[i*w:(i+1)*w], src[i*stride:i*stride+w])
	}
}

// keyBlocks adds to grad (the head's m×dₕ gradient of k or v) Pᵀ·x a
// block of keys at a time, P being the panels and x the m×dₕ factor, each
// block's product over the queries that see it (all queries unless skip).
func (hw *headWork) keyBlocks(grad, panels, x, tmp []float32, skip bool) {
	m, dh, bs := hw.m, hw.dh, hw.bs
	for j0 := 0; j0 < m; j0 += bs {
		j1 := min(j0+bs, m)
		bw := j1 - j0
		lo, hi := 0, m
		if skip {
			lo, hi = hw.queries(j0, j1)
		}
		panel := panels[j0*m : j0*m+m*bw]
		hw.path.MatMulTN(tmp[:bw*dh], panel[lo*bw:hi*bw], x[lo*dh:hi*dh], bw, hi-lo, dh)
		vek32.Add_Inplace(grad[j0*dh:j1*dh], tmp[:bw*dh])
	}
}

// RotateHalf applies rotary position embeddings in rotate-half pairing to x,
// an (h·n)×dₕ tensor holding h heads of n tokens each in the layout of
// SplitHeads, where token i is at position pos[i]. With half = dₕ/2 and p the
// row's position, element j of a row becomes
//
//	y_j = x_j·cos[p, j] + x_{j'}·sin[p, j],  j' = j + half for j < half, j − half otherwise,
//
// cos and sin being tables with a row per position (constants: they receive
// no gradient). It computes what Mul, SliceCols, ConcatCols and Add compute
// for the same formula, with the same roundings, and keeps only its output.
// pos is copied.
func (tp *Tape) RotateHalf(x, cos, sin *Tensor, pos []int) *Tensor {
	n, dh := len(pos), x.Cols
	if n == 0 || dh%2 != 0 || x.Rows%n != 0 || cos.Cols != dh || sin.Cols != dh || sin.Rows != cos.Rows {
		panic(fmt.Sprintf("autograd.RotateHalf: x %s, cos %s, sin %s, %d positions: want (h·%d)x(even dh) and dh-wide tables",
			x.shape(), cos.shape(), sin.shape(), n, n))
	}
	checkRows("RotateHalf", cos, pos)
	half := dh / 2
	out := tp.alloc(x.Rows, dh, needsGrad(x))
	for r := 0; r < x.Rows; r++ {
		p := pos[r%n]
		c, s := cos.Data[p*dh:(p+1)*dh], sin.Data[p*dh:(p+1)*dh]
		xr, y := x.Data[r*dh:(r+1)*dh], out.Data[r*dh:(r+1)*dh]
		for j := 0; j < half; j++ {
			y[j] = float32(xr[j]*c[j]) + float32(xr[j+half]*s[j])
			y[j+half] = float32(xr[j+half]*c[j+half]) + float32(xr[j]*s[j+half])
		}
	}
	if out.Grad != nil {
		nd := tp.push(opRotateHalf, out, x, cos)
		nd.list = append(nd.list, sin)
		nd.idx = append(nd.idx, pos...)
	}
	return tp.store(out)
}

// backwardRotateHalf adds dx_j += g_j·cos[p, j] and then
// dx_j += g_{j'}·sin[p, j'], in the order the equivalent chain adds them.
func (tp *Tape) backwardRotateHalf(nd *node) {
	x, cos, sin := nd.a, nd.b, nd.list[0]
	if x.Grad == nil {
		return
	}
	n, dh := len(nd.idx), x.Cols
	half := dh / 2
	g := nd.out.Grad
	for r := 0; r < x.Rows; r++ {
		p := nd.idx[r%n]
		c, s := cos.Data[p*dh:(p+1)*dh], sin.Data[p*dh:(p+1)*dh]
		gr, dx := g[r*dh:(r+1)*dh], x.Grad[r*dh:(r+1)*dh]
		for j := range dx {
			dx[j] += float32(gr[j] * c[j])
		}
		for j := 0; j < half; j++ {
			dx[j] += float32(gr[j+half] * s[j+half])
			dx[j+half] += float32(gr[j] * s[j])
		}
	}
}
