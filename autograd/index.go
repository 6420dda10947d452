package autograd

import (
	"fmt"

	"github.com/viterin/vek/vek32"
)

// GatherRows returns the rows of a listed in idx, in that order: row r of the
// result is row idx[r] of a. Indices may repeat. idx is copied.
func (tp *Tape) GatherRows(a *Tensor, idx []int) *Tensor {
	checkRows("GatherRows", a, idx)
	out := tp.alloc(len(idx), a.Cols, needsGrad(a))
	for r, i := range idx {
		copy(out.Data[r*a.Cols:(r+1)*a.Cols], a.Data[i*a.Cols:(i+1)*a.Cols])
	}
	if out.Grad != nil {
		nd := tp.push(opGatherRows, out, a, nil)
		nd.idx = append(nd.idx, idx...)
	}
	return out
}

// ScatterAddRows returns a copy of base with row r of src added into row
// idx[r], for every r; rows of base not listed pass through unchanged, and a
// repeated index adds every row sent to it. idx is copied.
func (tp *Tape) ScatterAddRows(base, src *Tensor, idx []int) *Tensor {
	checkRows("ScatterAddRows", base, idx)
	if src.Rows != len(idx) || src.Cols != base.Cols {
		panic(fmt.Sprintf("autograd.ScatterAddRows: base is %s, src is %s, %d indices: src must be %dx%d",
			base.shape(), src.shape(), len(idx), len(idx), base.Cols))
	}
	out := tp.alloc(base.Rows, base.Cols, needsGrad(base, src))
	copy(out.Data, base.Data)
	c := base.Cols
	for r, i := range idx {
		vek32.Add_Inplace(out.Data[i*c:(i+1)*c], src.Data[r*c:(r+1)*c])
	}
	if out.Grad != nil {
		nd := tp.push(opScatterAddRows, out, base, src)
		nd.idx = append(nd.idx, idx...)
	}
	return tp.store(out)
}

func checkRows(op string, a *Tensor, idx []int) {
	for r, i := range idx {
		if i < 0 || i >= a.Rows {
			panic(fmt.Sprintf("autograd.%s: index %d at position %d out of range for %s", op, i, r, a.shape()))
		}
	}
}

// backwardGatherScatter differentiates GatherRows and ScatterAddRows.
func (tp *Tape) backwardGatherScatter(nd *node) {
	g := nd.out.Grad
	c := nd.out.Cols
	switch nd.op {
	case opGatherRows:
		if a := nd.a; a.Grad != nil {
			for r, i := range nd.idx {
				vek32.Add_Inplace(a.Grad[i*c:(i+1)*c], g[r*c:(r+1)*c])
			}
		}
	case opScatterAddRows:
		if base := nd.a; base.Grad != nil {
			vek32.Add_Inplace(base.Grad, g)
		}
		if src := nd.b; src.Grad != nil {
			for r, i := range nd.idx {
				vek32.Add_Inplace(src.Grad[r*c:(r+1)*c], g[i*c:(i+1)*c])
			}
		}
	}
}

// Reshape returns a rows×cols tensor with a's elements in the same row-major
// order. It shares a's memory and records nothing.
func (tp *Tape) Reshape(a *Tensor, rows, cols int) *Tensor {
	if rows < 0 || cols < 0 || rows*cols != a.Len() {
		panic(fmt.Sprintf("autograd.Reshape: cannot reshape %s to %dx%d", a.shape(), rows, cols))
	}
	return tp.view(a, rows, cols, a.Data, a.Grad)
}

// SliceRows returns rows [r0, r1) of a. It shares a's memory and records
// nothing.
func (tp *Tape) SliceRows(a *Tensor, r0, r1 int) *Tensor {
	if r0 < 0 || r1 < r0 || r1 > a.Rows {
		panic(fmt.Sprintf("autograd.SliceRows: rows [%d, %d) out of range for %s", r0, r1, a.shape()))
	}
	var grad []float32
	if a.Grad != nil {
		grad = a.Grad[r0*a.Cols : r1*a.Cols]
	}
	return tp.view(a, r1-r0, a.Cols, a.Data[r0*a.Cols:r1*a.Cols], grad)
}

// StopGradient returns a tensor with a's values through which no gradient
// flows: sg(a) in docs/spec.md. It shares a's memory.
func (tp *Tape) StopGradient(a *Tensor) *Tensor { return tp.view(a, a.Rows, a.Cols, a.Data, nil) }

// SliceCols returns columns [c0, c1) of a as a new tensor.
func (tp *Tape) SliceCols(a *Tensor, c0, c1 int) *Tensor {
	if c0 < 0 || c1 < c0 || c1 > a.Cols {
		panic(fmt.Sprintf("autograd.SliceCols: columns [%d, %d) out of range for %s", c0, c1, a.shape()))
	}
	w := c1 - c0
	out := tp.alloc(a.Rows, w, needsGrad(a))
	for i := 0; i < a.Rows; i++ {
		copy(out.Data[i*w:(i+1)*w], a.Data[i*a.Cols+c0:i*a.Cols+c1])
	}
	if out.Grad != nil {
		tp.push(opSliceCols, out, a, nil).arg = c0
	}
	return out
}

// ConcatRows stacks tensors with equal column counts on top of each other.
func (tp *Tape) ConcatRows(ts ...*Tensor) *Tensor {
	rows := 0
	for _, t := range ts {
		if t.Cols != ts[0].Cols {
			panic(fmt.Sprintf("autograd.ConcatRows: %s and %s have different column counts", ts[0].shape(), t.shape()))
		}
		rows += t.Rows
	}
	out := tp.alloc(rows, ts[0].Cols, needsGrad(ts...))
	off := 0
	for _, t := range ts {
		off += copy(out.Data[off:], t.Data)
	}
	if out.Grad != nil {
		nd := tp.push(opConcatRows, out, nil, nil)
		nd.list = append(nd.list, ts...)
	}
	return out
}

// ConcatCols places tensors with equal row counts side by side.
func (tp *Tape) ConcatCols(ts ...*Tensor) *Tensor {
	cols := 0
	for _, t := range ts {
		if t.Rows != ts[0].Rows {
			panic(fmt.Sprintf("autograd.ConcatCols: %s and %s have different row counts", ts[0].shape(), t.shape()))
		}
		cols += t.Cols
	}
	out := tp.alloc(ts[0].Rows, cols, needsGrad(ts...))
	for i := 0; i < out.Rows; i++ {
		off := i * cols
		for _, t := range ts {
			off += copy(out.Data[off:], t.Data[i*t.Cols:(i+1)*t.Cols])
		}
	}
	if out.Grad != nil {
		nd := tp.push(opConcatCols, out, nil, nil)
		nd.list = append(nd.list, ts...)
	}
	return out
}

// backwardSliceConcat differentiates SliceCols, ConcatRows and ConcatCols.
func (tp *Tape) backwardSliceConcat(nd *node) {
	g, out := nd.out.Grad, nd.out
	switch nd.op {
	case opSliceCols:
		a := nd.a
		if a.Grad == nil {
			return
		}
		for i := 0; i < a.Rows; i++ {
			vek32.Add_Inplace(a.Grad[i*a.Cols+nd.arg:i*a.Cols+nd.arg+out.Cols], g[i*out.Cols:(i+1)*out.Cols])
		}
	case opConcatRows:
		off := 0
		for _, t := range nd.list {
			if t.Grad != nil {
				vek32.Add_Inplace(t.Grad, g[off:off+t.Len()])
			}
			off += t.Len()
		}
	case opConcatCols:
		for i := 0; i < out.Rows; i++ {
			off := i * out.Cols
			for _, t := range nd.list {
				if t.Grad != nil {
					vek32.Add_Inplace(t.Grad[i*t.Cols:(i+1)*t.Cols], g[off:off+t.Cols])
				}
				off += t.Cols
			}
		}
	}
}

// SplitHeads turns a T×(h·dₕ) tensor, whose columns are h heads of width dₕ
// side by side, into an (h·T)×dₕ tensor holding head 0's T rows, then head
// 1's, and so on, so that each head is a contiguous block of rows.
func (tp *Tape) SplitHeads(a *Tensor, h int) *Tensor {
	if h <= 0 || a.Cols%h != 0 {
		panic(fmt.Sprintf("autograd.SplitHeads: %s does not split into %d heads", a.shape(), h))
	}
	out := tp.alloc(h*a.Rows, a.Cols/h, needsGrad(a))
	permute(out.Data, a.Data, a.Rows, h, a.Cols/h, true, false)
	if out.Grad != nil {
		tp.push(opSplitHeads, out, a, nil).arg = h
	}
	return out
}

// MergeHeads is the inverse of SplitHeads: it turns an (h·T)×dₕ tensor back
// into T×(h·dₕ).
func (tp *Tape) MergeHeads(a *Tensor, h int) *Tensor {
	if h <= 0 || a.Rows%h != 0 {
		panic(fmt.Sprintf("autograd.MergeHeads: %s does not merge from %d heads", a.shape(), h))
	}
	t := a.Rows / h
	out := tp.alloc(t, h*a.Cols, needsGrad(a))
	permute(out.Data, a.Data, t, h, a.Cols, false, false)
	if out.Grad != nil {
		tp.push(opMergeHeads, out, a, nil).arg = h
	}
	return out
}

// permute moves data between the T×(h·dₕ) layout and the (h·T)×dₕ layout.
// With split it reads the first and writes the second; otherwise the other
// way round. With add it adds into dst instead of copying.
func permute(dst, src []float32, t, h, dh int, split, add bool) {
	for i := 0; i < t; i++ {
		for k := 0; k < h; k++ {
			wide := i*h*dh + k*dh // (i, head k) in T×(h·dₕ)
			tall := (k*t + i) * dh
			d, s := dst[tall:tall+dh], src[wide:wide+dh]
			if !split {
				d, s = dst[wide:wide+dh], src[tall:tall+dh]
			}
			if add {
				vek32.Add_Inplace(d, s)
			} else {
				copy(d, s)
			}
		}
	}
}

func (tp *Tape) backwardHeads(nd *node) {
	a := nd.a
	if a.Grad == nil {
		return
	}
	h := nd.arg
	if nd.op == opSplitHeads {
		// out is (h·T)×dₕ; send its gradient back to the wide layout.
		permute(a.Grad, nd.out.Grad, a.Rows, h, a.Cols/h, false, true)
	} else {
		permute(a.Grad, nd.out.Grad, a.Rows/h, h, a.Cols, true, true)
	}
}

// MaskedFill returns a copy of a with every element whose mask entry is true
// set to v (typically -Inf before a softmax). mask has one entry per element
// and is copied. No gradient flows to the filled elements.
func (tp *Tape) MaskedFill(a *Tensor, mask []bool, v float32) *Tensor {
	if len(mask) != a.Len() {
		panic(fmt.Sprintf("autograd.MaskedFill: a is %s but mask has %d entries", a.shape(), len(mask)))
	}
	out := tp.alloc(a.Rows, a.Cols, needsGrad(a))
	for i, m := range mask {
		if m {
			out.Data[i] = v
		} else {
			out.Data[i] = a.Data[i]
		}
	}
	if out.Grad != nil {
		nd := tp.push(opMaskedFill, out, a, nil)
		nd.mask = append(nd.mask, mask...)
	}
	return out
}

func (tp *Tape) backwardMaskedFill(nd *node) {
	a, g := nd.a, nd.out.Grad
	if a.Grad == nil {
		return
	}
	for i, m := range nd.mask {
		if !m {
			a.Grad[i] += g[i]
		}
	}
}
