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
		nd.n = heads
		// idx holds window, then each sequence's length and positions.
		nd.idx = append(nd.idx, window)
		for _, p := range pos {
			nd.idx = append(nd.idx, len(p))
			nd.idx = append(nd.idx, p...)
		}
	}
	stats := 0 // where the current sequence's row statistics start in nd.vals
	off := 0
	for _, p := range pos {
		m := len(p)
		if m == 0 {
			continue
		}
		var vals []float64
		if nd != nil {
			nd.vals = slices.Grow(nd.vals, 2*heads*m)[:stats+2*heads*m]
			vals = nd.vals[stats:]
			stats += 2 * heads * m
		}
		w := workers(heads)
		buf, e := tp.f32(w*(m*m+m*dh)), tp.f64(w*m)
		forEachHead(heads, w, func(hd, wk int) {
			b := buf[wk*(m*m+m*dh) : (wk+1)*(m*m+m*dh)]
			probs, head := b[:m*m], b[m*m:]
			ew := e[wk*m : (wk+1)*m]
			r := (hd*total + off) * dh
			qh, kh, vh := q.Data[r:r+m*dh], k.Data[r:r+m*dh], v.Data[r:r+m*dh]
			kernel.MatMulNT(probs, qh, kh, m, dh, m)
			for i := 0; i < m; i++ {
				row := probs[i*m : (i+1)*m]
				hide(row, p, i, window)
				mx, sum := rowExpSum(row, ew)
				for j := range row {
					row[j] = float32(ew[j] / sum)
				}
				if vals != nil {
					vals[2*(hd*m+i)], vals[2*(hd*m+i)+1] = mx, sum
				}
			}
			kernel.MatMulNN(head, probs, vh, m, m, dh)
			for i := 0; i < m; i++ {
				copy(out.Data[(off+i)*heads*dh+hd*dh:][:dh], head[i*dh:(i+1)*dh])
			}
		})
		off += m
	}
	return out
}

// workers returns how many goroutines share the heads of an attention
// operation: one per head up to GOMAXPROCS.
func workers(heads int) int { return max(1, min(heads, runtime.GOMAXPROCS(0))) }

// forEachHead calls f(hd, worker) for every head hd < heads on w goroutines
// (the caller's included), each head exactly once, with worker < w naming
// the goroutine so that f can use per-worker scratch space. Every head is
// computed by the same operations whichever goroutine runs it, so the
// results do not depend on w.
func forEachHead(heads, w int, f func(hd, worker int)) {
	if w == 1 {
		for hd := 0; hd < heads; hd++ {
			f(hd, 0)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	run := func(worker int) {
		for hd := int(next.Add(1) - 1); hd < heads; hd = int(next.Add(1) - 1) {
			f(hd, worker)
		}
	}
	for wk := 1; wk < w; wk++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(wk)
		}()
	}
	run(0)
	wg.Wait()
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
	heads, dh := nd.n, q.Cols
	total := q.Rows / heads
	window := nd.idx[0]
	rest := nd.idx[1:]
	stats := nd.vals
	g := nd.out.Grad
	off := 0
	for len(rest) > 0 {
		m := rest[0]
		p := rest[1 : 1+m]
		rest = rest[1+m:]
		vals := stats[:2*heads*m]
		stats = stats[2*heads*m:]
		w := workers(heads)
		size := 2*m*m + 2*m*dh
		buf := tp.f32(w * size)
		forEachHead(heads, w, func(hd, wk int) {
			b := buf[wk*size : (wk+1)*size]
			probs, dp, dout, tmp := b[:m*m], b[m*m:2*m*m], b[2*m*m:2*m*m+m*dh], b[2*m*m+m*dh:]
			r := (hd*total + off) * dh
			qh, kh, vh := q.Data[r:r+m*dh], k.Data[r:r+m*dh], v.Data[r:r+m*dh]
			kernel.MatMulNT(probs, qh, kh, m, dh, m)
			for i := 0; i < m; i++ {
				row := probs[i*m : (i+1)*m]
				hide(row, p, i, window)
				mx, sum := vals[2*(hd*m+i)], vals[2*(hd*m+i)+1]
				for j, s := range row {
					row[j] = float32(math.Exp(float64(s)-mx) / sum)
				}
			}
			for i := 0; i < m; i++ {
				copy(dout[i*dh:(i+1)*dh], g[(off+i)*heads*dh+hd*dh:][:dh])
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
		})
		off += m
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
