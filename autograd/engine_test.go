package autograd

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// mlp is a two-layer perceptron used to test the engine as a whole:
// logits = GELU(x·W1 + b1)·W2 + b2, loss = CrossEntropy(logits, y).
type mlp struct {
	w1, b1, w2, b2 *Tensor
}

func newMLP(rng *rand.Rand, in, hidden, out int) *mlp {
	param := func(r, c int, scale float64) *Tensor {
		d := make([]float32, r*c)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * scale)
		}
		return NewParam(r, c, d)
	}
	return &mlp{
		w1: param(in, hidden, 1/math.Sqrt(float64(in))),
		b1: param(1, hidden, 0.1),
		w2: param(hidden, out, 1/math.Sqrt(float64(hidden))),
		b2: param(1, out, 0.1),
	}
}

func (m *mlp) params() []*Tensor { return []*Tensor{m.w1, m.b1, m.w2, m.b2} }

func (m *mlp) loss(tp *Tape, x *Tensor, y []int) *Tensor {
	h := tp.GELU(tp.Add(tp.MatMul(x, m.w1), m.b1))
	return tp.CrossEntropy(tp.Add(tp.MatMul(h, m.w2), m.b2), y)
}

// step runs one forward and backward pass on a reset tape.
func (m *mlp) step(tp *Tape, x *Tensor, y []int) float32 {
	tp.Reset()
	for _, p := range m.params() {
		p.ZeroGrad()
	}
	l := m.loss(tp, x, y)
	tp.Backward(l)
	return l.Data[0]
}

func batch(rng *rand.Rand, n, in, classes int) (*Tensor, []int) {
	x := make([]float32, n*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int, n)
	for i := range y {
		y[i] = rng.IntN(classes)
	}
	return New(n, in, x), y
}

// snapshot returns the loss bits and every gradient, for bitwise comparison.
func snapshot(m *mlp, loss float32) [][]float32 {
	out := [][]float32{{loss}}
	for _, p := range m.params() {
		out = append(out, slices.Clone(p.Grad))
	}
	return out
}

func firstDifference(a, b [][]float32) (int, int, bool) {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// TestDeterministicAcrossGOMAXPROCS checks that a forward and backward pass
// large enough to run the matrix kernels on several goroutines gives the same
// bits run after run and with GOMAXPROCS 1, 2 and 4.
func TestDeterministicAcrossGOMAXPROCS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newMLP(rng, 128, 256, 32)
	x, y := batch(rng, 96, 128, 32)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var want [][]float32
	for _, procs := range []int{1, 2, 4, 1, 4} {
		runtime.GOMAXPROCS(procs)
		var tp Tape
		got := snapshot(m, m.step(&tp, x, y))
		if want == nil {
			want = got
			continue
		}
		if i, j, diff := firstDifference(want, got); diff {
			t.Fatalf("GOMAXPROCS=%d: tensor %d element %d is %v, first run gave %v", procs, i, j, got[i][j], want[i][j])
		}
	}
}

// TestTapeReuse checks that a reset tape reproduces the first pass's bits
// and allocates nothing once warm.
func TestTapeReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m := newMLP(rng, 16, 32, 5)
	x, y := batch(rng, 12, 16, 5)
	var tp Tape
	first := snapshot(m, m.step(&tp, x, y))
	for range 3 {
		again := snapshot(m, m.step(&tp, x, y))
		if i, j, diff := firstDifference(first, again); diff {
			t.Fatalf("after Reset, tensor %d element %d is %v, first pass gave %v", i, j, again[i][j], first[i][j])
		}
	}
	if allocs := testing.AllocsPerRun(20, func() { m.step(&tp, x, y) }); allocs != 0 {
		t.Errorf("a forward+backward pass on a reused tape allocates %v times, want 0", allocs)
	}
}

// TestAlternatingPassesReuseBuffers checks that passes whose operations
// differ, so that a tensor the tape handed out as a view in one pass is a
// result in the next (a decoder whose routed layers skip some tokens),
// allocate nothing once the tape has seen each, and compute the same values.
func TestAlternatingPassesReuseBuffers(t *testing.T) {
	a := New(4, 8, nil)
	for i := range a.Data {
		a.Data[i] = float32(i)
	}
	var tp Tape
	viewFirst := func() *Tensor { tp.Reset(); return tp.Scale(tp.SliceRows(a, 1, 3), 2) }
	resultFirst := func() *Tensor { tp.Reset(); return tp.SliceRows(tp.Scale(a, 2), 1, 3) }
	for range 2 {
		for name, pass := range map[string]func() *Tensor{"view first": viewFirst, "result first": resultFirst} {
			got := pass()
			for i, v := range got.Data {
				if want := 2 * a.Data[8+i]; v != want {
					t.Fatalf("%s: element %d is %v, want %v", name, i, v, want)
				}
			}
		}
	}
	if n := testing.AllocsPerRun(10, func() { viewFirst(); resultFirst() }); n != 0 {
		t.Errorf("alternating passes allocate %v times, want 0", n)
	}
}

// TestTokenIndependence checks that a token's output does not depend on the
// other tokens in its batch: each row of a batched forward equals, bit for
// bit, the same token run alone.
func TestTokenIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := newMLP(rng, 40, 72, 9)
	x, _ := batch(rng, 37, 40, 9)
	forward := func(tp *Tape, x *Tensor) *Tensor {
		h := tp.GELU(tp.Add(tp.MatMul(x, m.w1), m.b1))
		return tp.Softmax(tp.Add(tp.MatMul(h, m.w2), m.b2))
	}
	var tp Tape
	all := forward(&tp, x)
	for i := 0; i < x.Rows; i++ {
		var one Tape
		row := forward(&one, New(1, x.Cols, x.Row(i)))
		for j, v := range row.Data {
			if math.Float32bits(v) != math.Float32bits(all.At(i, j)) {
				t.Fatalf("token %d, output %d: alone %v, in a batch of %d %v", i, j, v, x.Rows, all.At(i, j))
			}
		}
	}
}

// TestShapePanics checks that a shape error names the operation and shapes.
func TestShapePanics(t *testing.T) {
	var tp Tape
	a, b := New(2, 3, nil), New(4, 5, nil)
	cases := []struct {
		name string
		f    func()
		want []string
	}{
		{"MatMul", func() { tp.MatMul(a, b) }, []string{"MatMul", "2x3", "4x5"}},
		{"MatMulNT", func() { tp.MatMulNT(a, b) }, []string{"MatMulNT", "2x3", "4x5"}},
		{"MatMulTN", func() { tp.MatMulTN(a, b) }, []string{"MatMulTN", "2x3", "4x5"}},
		{"Add", func() { tp.Add(a, b) }, []string{"Add", "2x3", "4x5"}},
		{"Mul", func() { tp.Mul(a, New(1, 2, nil)) }, []string{"Mul", "1x2", "2x3"}},
		{"GatherRows", func() { tp.GatherRows(a, []int{0, 2}) }, []string{"GatherRows", "index 2", "2x3"}},
		{"ScatterAddRows", func() { tp.ScatterAddRows(a, b, []int{0}) }, []string{"ScatterAddRows", "2x3", "4x5"}},
		{"Reshape", func() { tp.Reshape(a, 4, 2) }, []string{"Reshape", "2x3", "4x2"}},
		{"SplitHeads", func() { tp.SplitHeads(a, 2) }, []string{"SplitHeads", "2x3", "2 heads"}},
		{"ConcatRows", func() { tp.ConcatRows(a, b) }, []string{"ConcatRows", "2x3", "4x5"}},
		{"CrossEntropy", func() { tp.CrossEntropy(a, []int{0}) }, []string{"CrossEntropy", "2x3", "1 targets"}},
		{"Backward", func() { tp.Backward(NewParam(2, 3, nil)) }, []string{"Backward", "2x3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("panic message %q does not mention %q", msg, w)
					}
				}
			}()
			c.f()
		})
	}
}

// TestStopGradient checks that no gradient crosses StopGradient while the
// value does, and that the straight-through weight w = g + sg(m·g − g) of
// docs/spec.md §7 has derivative exactly 1 with respect to g.
func TestStopGradient(t *testing.T) {
	var tp Tape
	g := NewParam(4, 1, []float32{0.5, -1.25, 2, 3})
	m := New(4, 1, []float32{1, 0, 1, 0})
	w := tp.Add(g, tp.StopGradient(tp.Sub(tp.Mul(m, g), g)))
	for i, want := range []float32{0.5, 0, 2, 0} {
		if w.Data[i] != want {
			t.Errorf("w[%d] = %v, want m·g = %v", i, w.Data[i], want)
		}
	}
	tp.BackwardFrom(w, []float32{1, 1, 1, 1})
	for i, d := range g.Grad {
		if d != 1 {
			t.Errorf("∂w[%d]/∂g[%d] = %v, want 1 for selected and unselected tokens alike", i, i, d)
		}
	}
}

func TestZerosIsReusedAndCleared(t *testing.T) {
	var tp Tape
	z := tp.Zeros(2, 3)
	z.Data[4] = 7
	tp.Reset()
	z2 := tp.Zeros(2, 3)
	if z2 != z || z2.Grad != nil {
		t.Fatalf("Zeros after Reset: got a new tensor (%v) or a gradient (%v); want the same constant reused", z2 != z, z2.Grad != nil)
	}
	for i, v := range z2.Data {
		if v != 0 {
			t.Fatalf("Zeros after Reset: element %d is %v, want 0", i, v)
		}
	}
}

// TestGradientsOfAReusedTape checks the lazy zeroing of gradients on a tape
// whose buffers hold the last pass's gradients: after a Reset, a tensor off
// the path to the loss has a zero gradient after Backward, and a tensor
// whose gradient is first written by a product's backward step (directly,
// without a work buffer) and then added into through views (SliceRows and
// Reshape of it) and directly gets the gradient a fresh tape gives.
func TestGradientsOfAReusedTape(t *testing.T) {
	w := NewParam(4, 3, []float32{1, -2, 3, 0.5, 4, -1, 2, 2, -3, 1, 0.25, -0.5})
	mat := New(3, 2, []float32{1, 2, -1, 0.5, 3, -2})
	pass := func(tp *Tape) (grads [][]float32) {
		w.ZeroGrad()
		h := tp.Scale(w, 3)
		off := tp.Scale(h, -1) // not on the path to the loss
		direct := tp.SumAll(tp.Mul(h, h))
		top := tp.Reshape(tp.SliceRows(h, 0, 2), 3, 2) // h's first two rows, reshaped
		viewed := tp.SumAll(tp.Mul(top, top))
		// A product recorded last, so that its backward step is the first
		// to reach h and writes h's gradient directly (backwardMatMul).
		prod := tp.SumAll(tp.MatMul(h, mat))
		loss := tp.Add(tp.Add(viewed, direct), prod)
		tp.Backward(loss)
		return [][]float32{
			append([]float32(nil), w.Grad...),
			append([]float32(nil), h.Grad...),
			append([]float32(nil), off.Grad...),
		}
	}
	// h = 3w, and the loss Σ_{rows 0-1} h² + Σ h² + Σ h·mat has
	// ∂/∂h_ij = 4h_ij on the first two rows and 2h_ij on the others, plus
	// Σ_l mat_jl; ∂/∂w = 3·∂/∂h.
	want := [][]float32{make([]float32, 12), make([]float32, 12), make([]float32, 12)}
	for i, v := range w.Data {
		dh := 2 * 3 * v
		if i < 6 {
			dh *= 2
		}
		dh += mat.Data[2*(i%3)] + mat.Data[2*(i%3)+1]
		want[0][i], want[1][i] = 3*dh, dh
	}
	var fresh Tape
	for k, g := range pass(&fresh) {
		for i := range g {
			if g[i] != want[k][i] {
				t.Fatalf("fresh tape: gradient %d[%d] = %v, want %v", k, i, g[i], want[k][i])
			}
		}
	}
	var tp Tape
	pass(&tp)
	// Leave garbage in every gradient buffer the next pass will reuse.
	for _, x := range tp.pool[:tp.used] {
		for i := range x.Grad {
			x.Grad[i] = float32(i) + 7
		}
	}
	tp.Reset()
	got := pass(&tp)
	for k, name := range []string{"w", "h", "off-path tensor"} {
		for i := range want[k] {
			if got[k][i] != want[k][i] {
				t.Fatalf("reused tape: %s gradient[%d] = %v, want %v", name, i, got[k][i], want[k][i])
			}
		}
	}
}
