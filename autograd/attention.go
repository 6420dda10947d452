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
// gradients. pos is copied.
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
	hw.headParams = headParams{q: q, k: k, v: v, out: out, heads: heads, total: total, dh: dh, window: window}
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
		hw.p, hw.m = p, m
		hw.buf, hw.e = tp.f32(w*(m*m+m*dh)), tp.f64(w*m)
		hw.runOn(w)
		hw.off += m
	}
	hw.headParams = headParams{}
	return out
}

// headWork is the per-sequence work of CausalAttention's forward or backward
// pass, shared out head by head among goroutines. A tape keeps one and
// reuses it, so that sharing the work allocates nothing.
type headWork struct {
	headParams
	next, joined atomic.Int64
	wg           sync.WaitGroup
}

// headParams describes the work of a headWork.
type headParams struct {
	backward     bool
	q, k, v, out *Tensor
	heads, total int // heads and rows per head
	dh, window   int
	p            []int // the sequence's positions
	off, m       int   // its first row in each head's block and its length
	buf          []float32
	e            []float64
	vals         []float64 // row maxima and sums, two per row of each head
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

// forwardHead computes head hd's probabilities, row statistics and output.
func (hw *headWork) forwardHead(hd, wk int) {
	m, dh, heads := hw.m, hw.dh, hw.heads
	b := hw.buf[wk*(m*m+m*dh) : (wk+1)*(m*m+m*dh)]
	probs, head := b[:m*m], b[m*m:]
	ew := hw.e[wk*m : (wk+1)*m]
	r := (hd*hw.total + hw.off) * dh
	qh, kh, vh := hw.q.Data[r:r+m*dh], hw.k.Data[r:r+m*dh], hw.v.Data[r:r+m*dh]
	kernel.MatMulNT(probs, qh, kh, m, dh, m)
	for i := 0; i < m; i++ {
		row := probs[i*m : (i+1)*m]
		hide(row, hw.p, i, hw.window)
		mx, sum := rowExpSum(row, ew)
		for j := range row {
			row[j] = float32(ew[j] / sum)
		}
		if hw.vals != nil {
			hw.vals[2*(hd*m+i)], hw.vals[2*(hd*m+i)+1] = mx, sum
		}
	}
	kernel.MatMulNN(head, probs, vh, m, m, dh)
	for i := 0; i < m; i++ {
		copy(hw.out.Data[(hw.off+i)*heads*dh+hd*dh:][:dh], head[i*dh:(i+1)*dh])
	}
}

// hide sets to −Inf the scores of row i that query i may not see.
func hide(row []float32, p []int, i, window int) {
	pi := p[i]
	for j, pj := range p {
		if pj > pi || (window > 0 && pi-pj >= window) {
			row[j] = float32(math.Inf(-1))
		}
	}
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
	hw.headParams = headParams{backward: true, q: q, k: k, v: v, out: nd.out, heads: heads, total: total, dh: dh, window: window}
	for len(rest) > 0 {
		m := rest[0]
		hw.p, hw.m = rest[1:1+m], m
		rest = rest[1+m:]
		hw.vals = stats[:2*heads*m]
		stats = stats[2*heads*m:]
		w := workers(heads)
		hw.buf = tp.f32(w * (2*m*m + 2*m*dh))
		hw.runOn(w)
		hw.off += m
	}
	hw.headParams = headParams{}
}

// backwardHead adds head hd's gradients into q, k and v.
func (hw *headWork) backwardHead(hd, wk int) {
	m, dh, heads := hw.m, hw.dh, hw.heads
	q, k, v, g := hw.q, hw.k, hw.v, hw.out.Grad
	size := 2*m*m + 2*m*dh
	b := hw.buf[wk*size : (wk+1)*size]
	probs, dp, dout, tmp := b[:m*m], b[m*m:2*m*m], b[2*m*m:2*m*m+m*dh], b[2*m*m+m*dh:]
	r := (hd*hw.total + hw.off) * dh
	qh, kh, vh := q.Data[r:r+m*dh], k.Data[r:r+m*dh], v.Data[r:r+m*dh]
	kernel.MatMulNT(probs, qh, kh, m, dh, m)
	for i := 0; i < m; i++ {
		row := probs[i*m : (i+1)*m]
		hide(row, hw.p, i, hw.window)
		mx, sum := hw.vals[2*(hd*m+i)], hw.vals[2*(hd*m+i)+1]
		for j, s := range row {
			row[j] = float32(exp(float64(s)-mx) / sum)
		}
	}
	for i := 0; i < m; i++ {
		copy(dout[i*dh:(i+1)*dh], g[(hw.off+i)*heads*dh+hd*dh:][:dh])
	}
	if v.Grad != nil {
		kernel.MatMulTN(tmp, probs, dout, m, m, dh)
		vek32.Add_Inplace(v.Grad[r:r+m*dh], tmp)
	}
	if q.Grad == nil && k.Grad == nil {
		return
	}
	kernel.MatMulNT(dp, dout, vh, m, dh, m)
	for i := 0; i < m; i++ {
		yi, gi := probs[i*m:(i+1)*m], dp[i*m:(i+1)*m]
		var s float64
		for j, w := range gi {
			s += float64(float64(w) * float64(yi[j]))
		}
		for j := range gi {
			gi[j] = float32(float64(yi[j]) * (float64(gi[j]) - s))
		}
	}
	if q.Grad != nil {
		kernel.MatMulNN(tmp, dp, kh, m, m, dh)
		vek32.Add_Inplace(q.Grad[r:r+m*dh], tmp)
	}
	if k.Grad != nil {
		kernel.MatMulTN(tmp, dp, qh, m, m, dh)
		vek32.Add_Inplace(k.Grad[r:r+m*dh], tmp)
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
	return out
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
