package autograd

import "fmt"

// Tensor is a row-major Rows×Cols matrix of float32 values with an optional
// gradient of the same shape.
type Tensor struct {
	Rows, Cols int
	// Data holds the values, row after row: element (i, j) is Data[i*Cols+j].
	Data []float32
	// Grad holds ∂loss/∂Data after a backward pass, or is nil when the tensor
	// is a constant that needs no gradient.
	Grad []float32

	// view is set on tape-owned tensors whose Data (and Grad) belong to
	// another tensor, so that the tape never writes into them on reuse.
	view bool
	// dbuf keeps a tape-owned tensor's data buffer across passes in which
	// the tensor is a view, and gbuf its gradient buffer across passes in
	// which it needs no gradient: a tape whose operations differ from pass
	// to pass (a decoder whose routed layers skip some tokens) then reuses
	// its buffers instead of allocating them again.
	dbuf, gbuf []float32
	// base is the tensor whose gradient buffer a view's Grad is part of.
	base *Tensor
	// stale is set on a tape-owned tensor whose Grad has not been zeroed
	// since the tape handed it out: the backward pass zeroes it just before
	// the first operation adds into it (see Tape.BackwardFrom).
	stale bool
}

// freshGrad zeroes the gradient buffer t's Grad belongs to if it is stale.
func (t *Tensor) freshGrad() {
	b := t
	if t.base != nil {
		b = t.base
	}
	if b.stale {
		clear(b.Grad)
		b.stale = false
	}
}

// New returns a constant rows×cols tensor (one that receives no gradient)
// holding data, which it keeps rather than copies. A nil data allocates zeros.
func New(rows, cols int, data []float32) *Tensor {
	if data == nil {
		data = make([]float32, rows*cols)
	}
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		panic(fmt.Sprintf("autograd.New: shape %dx%d needs %d values, have %d", rows, cols, rows*cols, len(data)))
	}
	return &Tensor{Rows: rows, Cols: cols, Data: data}
}

// NewParam returns a rows×cols tensor that receives a gradient, holding data
// (kept, not copied; nil allocates zeros) and a zero gradient.
func NewParam(rows, cols int, data []float32) *Tensor {
	t := New(rows, cols, data)
	t.Grad = make([]float32, len(t.Data))
	return t
}

// RequiresGrad reports whether the tensor receives a gradient.
func (t *Tensor) RequiresGrad() bool { return t.Grad != nil }

// Len returns the number of elements, Rows*Cols.
func (t *Tensor) Len() int { return t.Rows * t.Cols }

// At returns element (i, j).
func (t *Tensor) At(i, j int) float32 {
	if i < 0 || i >= t.Rows || j < 0 || j >= t.Cols {
		panic(fmt.Sprintf("autograd.At: index (%d, %d) out of range for %s", i, j, t.shape()))
	}
	return t.Data[i*t.Cols+j]
}

// Row returns row i of Data, sharing its memory.
func (t *Tensor) Row(i int) []float32 {
	if i < 0 || i >= t.Rows {
		panic(fmt.Sprintf("autograd.Row: row %d out of range for %s", i, t.shape()))
	}
	return t.Data[i*t.Cols : (i+1)*t.Cols]
}

// ZeroGrad sets the gradient to zero; it does nothing for a constant.
func (t *Tensor) ZeroGrad() { clear(t.Grad) }

func (t *Tensor) shape() string { return fmt.Sprintf("%dx%d", t.Rows, t.Cols) }
