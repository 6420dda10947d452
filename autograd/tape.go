package autograd

import "fmt"

// Tape records the operations of a forward pass so that Backward can
// differentiate them. The zero value is an empty tape ready to use.
//
// A Tape is not safe for concurrent use; use one tape per goroutine.
type Tape struct {
	nodes []node
	// pool holds the tensors the tape has handed out; used counts those
	// handed out since the last Reset.
	pool []*Tensor
	used int
	// scratch and scratch64 are work buffers for backward passes.
	scratch   []float32
	scratch64 []float64
	// heads is CausalAttention's work shared among goroutines.
	heads *headWork
	// arenas hold the slices Make hands out, one arena per element type.
	arenas []resetter
	// rounding emulates low-precision products (SetRounding).
	rounding Rounding
}

// opcode names a recorded operation; node.backward dispatches on it.
type opcode uint8

// node is one recorded operation: its output, its operands and whatever the
// backward pass needs. Slices in a node keep their capacity across Reset so
// that a reused tape does not allocate.
type node struct {
	op     opcode
	out    *Tensor
	a, b   *Tensor
	scale  float32 // Scale's factor; a reduction's (1 for a sum, 1/count for a mean)
	arg    int     // the integer argument: broadcast mode, first column, heads or axis
	idx    []int
	mask   []bool
	target []float32
	list   []*Tensor
	saved  []float64 // intermediates the backward pass reuses (a loss's log-sum-exp per row)
	count  int       // number of terms a mean divides by
	// rowSumsInFormat sums a row-broadcast operand's gradient over the
	// rows in the Store format (Rounding.Store), as PyTorch's native
	// layer_norm backward sums its gain's and bias's gradients in bf16
	// (NormAffine).
	rowSumsInFormat bool
}

// Reset forgets the recorded operations and takes back every tensor and
// every slice (see Make) the tape handed out, to be reused by the next
// forward pass. Tensors and slices from before the Reset must not be used
// afterwards.
func (tp *Tape) Reset() {
	tp.nodes = tp.nodes[:0]
	tp.used = 0
	for _, a := range tp.arenas {
		a.reset()
	}
}

// Len returns the number of operations recorded since the last Reset.
func (tp *Tape) Len() int { return len(tp.nodes) }

// alloc returns a tape-owned rows×cols tensor whose Data is to be written in
// full by the caller; it has a Grad when grad is true, zeroed only when the
// backward pass first needs it: zeroing it here, in the forward pass, cost a
// pass over memory that the backward pass's first addition then repeats
// (docs/performance.md).
func (tp *Tape) alloc(rows, cols int, grad bool) *Tensor {
	t := tp.slot()
	n := rows * cols
	t.Rows, t.Cols = rows, cols
	t.dbuf = grow(t.dbuf, n)
	t.Data, t.view = t.dbuf, false
	t.Grad, t.base, t.stale = nil, nil, false
	if grad {
		t.gbuf = grow(t.gbuf, n)
		t.Grad, t.stale = t.gbuf, true
	}
	return t
}

// view returns a tape-owned tensor that shares data and grad with of.
func (tp *Tape) view(of *Tensor, rows, cols int, data, grad []float32) *Tensor {
	t := tp.slot()
	t.Rows, t.Cols, t.Data, t.Grad, t.view, t.stale = rows, cols, data, grad, true, false
	t.base = of
	if of.base != nil {
		t.base = of.base
	}
	return t
}

// slot returns the next tensor of the pool, adding one if the pool is used up.
func (tp *Tape) slot() *Tensor {
	if tp.used == len(tp.pool) {
		tp.pool = append(tp.pool, new(Tensor))
	}
	t := tp.pool[tp.used]
	tp.used++
	return t
}

// grow returns buf resized to n, reusing its memory when it is large enough
// and otherwise at least doubling it, so that a tensor that grows by a row
// a pass (a decoder's scores) costs amortised allocations.
func grow(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n, max(n, 2*cap(buf)))
}

// push appends a node for op with output out and returns it for the caller
// to fill in; it does not allocate once the tape has seen as many nodes.
func (tp *Tape) push(op opcode, out, a, b *Tensor) *node {
	if len(tp.nodes) < cap(tp.nodes) {
		tp.nodes = tp.nodes[:len(tp.nodes)+1]
	} else {
		tp.nodes = append(tp.nodes, node{})
	}
	nd := &tp.nodes[len(tp.nodes)-1]
	*nd = node{
		op: op, out: out, a: a, b: b,
		idx: nd.idx[:0], mask: nd.mask[:0], target: nd.target[:0], list: nd.list[:0], saved: nd.saved[:0],
	}
	return nd
}

// pop removes the node push added last, for an operation that turned out to
// need no gradient.
func (tp *Tape) pop() { tp.nodes = tp.nodes[:len(tp.nodes)-1] }

// needsGrad reports whether an operation on these operands needs a gradient.
func needsGrad(ts ...*Tensor) bool {
	for _, t := range ts {
		if t != nil && t.Grad != nil {
			return true
		}
	}
	return false
}

// Backward differentiates the scalar loss, a 1×1 tensor recorded on this
// tape, and adds ∂loss/∂t into the Grad of every tensor t it depends on.
func (tp *Tape) Backward(loss *Tensor) {
	if loss.Rows != 1 || loss.Cols != 1 {
		panic(fmt.Sprintf("autograd.Backward: loss must be 1x1, have %s", loss.shape()))
	}
	tp.BackwardFrom(loss, []float32{1})
}

// BackwardFrom differentiates the scalar Σ y⊙dy, where y was recorded on this
// tape and dy, of y's length, is the upstream gradient; it adds the gradient
// into every tensor y depends on. A y that receives no gradient is a no-op.
func (tp *Tape) BackwardFrom(y *Tensor, dy []float32) {
	if len(dy) != y.Len() {
		panic(fmt.Sprintf("autograd.BackwardFrom: y is %s but dy has %d values", y.shape(), len(dy)))
	}
	if y.Grad == nil {
		return
	}
	y.freshGrad()
	for i, g := range dy {
		y.Grad[i] += g
	}
	for i := len(tp.nodes) - 1; i >= 0; i-- {
		nd := &tp.nodes[i]
		if nd.out.Grad == nil {
			continue
		}
		// Gradients are zeroed here, just before the first addition into
		// them (every tensor the tape hands out with a gradient has a
		// node, so none is left unzeroed), instead of when the forward
		// pass allocated them.
		nd.out.freshGrad()
		for _, t := range [2]*Tensor{nd.a, nd.b} {
			// The products' backward pass may write a stale gradient
			// directly (backwardMatMul).
			if t != nil && t.Grad != nil && !isMatMul(nd.op) {
				t.freshGrad()
			}
		}
		for _, t := range nd.list {
			if t.Grad != nil {
				t.freshGrad()
			}
		}
		tp.storeGrad(nd.out)
		tp.backward(nd)
	}
}

// isMatMul reports whether op is one of the three matrix products.
func isMatMul(op opcode) bool { return op == opMatMul || op == opMatMulNT || op == opMatMulTN }

// f32 returns a tape-owned float32 work buffer of length n, contents undefined.
func (tp *Tape) f32(n int) []float32 {
	tp.scratch = grow(tp.scratch, n)
	return tp.scratch
}

// f64 returns a zeroed tape-owned float64 work buffer of length n.
func (tp *Tape) f64(n int) []float64 {
	if cap(tp.scratch64) < n {
		tp.scratch64 = make([]float64, n, max(n, 2*cap(tp.scratch64)))
	}
	tp.scratch64 = tp.scratch64[:n]
	clear(tp.scratch64)
	return tp.scratch64
}

// Zeros returns a tape-owned rows×cols constant of zeros (no gradient), to be
// reused by the next forward pass after Reset like every tensor the tape
// hands out.
func (tp *Tape) Zeros(rows, cols int) *Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("autograd.Zeros: shape %dx%d", rows, cols))
	}
	t := tp.alloc(rows, cols, false)
	clear(t.Data)
	return t
}
