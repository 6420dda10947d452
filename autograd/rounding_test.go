package autograd

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// toBF16 rounds to bfloat16 by the bits (nearest, ties to even), for finite
// values: enough for these tests, independent of the rounding under test.
func toBF16(x float32) float32 {
	b := math.Float32bits(x)
	b += 0x7FFF + (b >> 16 & 1)
	return math.Float32frombits(b &^ 0xFFFF)
}

func randomTensor(rng *rand.Rand, rows, cols int, grad bool) *Tensor {
	t := New(rows, cols, nil)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64())
	}
	if grad {
		t.Grad = make([]float32, len(t.Data))
	}
	return t
}

func roundedCopy(t *Tensor, grad bool) *Tensor {
	c := New(t.Rows, t.Cols, nil)
	for i, v := range t.Data {
		c.Data[i] = toBF16(v)
	}
	if grad {
		c.Grad = make([]float32, len(c.Data))
	}
	return c
}

// TestRoundingIsTheProductOfRoundedOperands holds a product under a bf16
// Rounding to the same product computed without rounding on rounded
// operands, its result and its gradients rounded afterwards, bit for bit.
func TestRoundingIsTheProductOfRoundedOperands(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	products := map[string]func(tp *Tape, a, b *Tensor) *Tensor{
		"MatMul":   (*Tape).MatMul,
		"MatMulNT": (*Tape).MatMulNT,
		"MatMulTN": (*Tape).MatMulTN,
	}
	shapes := map[string][4]int{"MatMul": {5, 7, 7, 3}, "MatMulNT": {5, 7, 3, 7}, "MatMulTN": {7, 5, 7, 3}}
	for name, prod := range products {
		sh := shapes[name]
		a, b := randomTensor(rng, sh[0], sh[1], true), randomTensor(rng, sh[2], sh[3], true)
		var tp Tape
		tp.SetRounding(Rounding{Operand: toBF16, Result: toBF16})
		out := prod(&tp, a, b)
		up := randomTensor(rng, out.Rows, out.Cols, false)
		tp.BackwardFrom(out, up.Data)

		ra, rb := roundedCopy(a, true), roundedCopy(b, true)
		var plain Tape
		want := prod(&plain, ra, rb)
		ru := roundedCopy(up, false)
		plain.BackwardFrom(want, ru.Data)
		for i, v := range want.Data {
			if out.Data[i] != toBF16(v) {
				t.Fatalf("%s: out[%d] = %v, want bf16(%v) = %v", name, i, out.Data[i], v, toBF16(v))
			}
		}
		for _, c := range []struct {
			what       string
			got, wantG []float32
		}{{"a", a.Grad, ra.Grad}, {"b", b.Grad, rb.Grad}} {
			for i, g := range c.wantG {
				if c.got[i] != toBF16(toBF16(g)) {
					t.Fatalf("%s: grad %s[%d] = %v, want %v", name, c.what, i, c.got[i], toBF16(g))
				}
			}
		}
	}
}

// TestRoundingAttention checks CausalAttention under a Rounding: it reads
// rounded q, k and v and stores a rounded output, and the zero Rounding
// changes no bit.
func TestRoundingAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	q, k, v := randomTensor(rng, 12, 4, true), randomTensor(rng, 12, 4, true), randomTensor(rng, 12, 4, true)
	pos := [][]int{{0, 2, 3, 7, 8, 9}}
	var tp Tape
	tp.SetRounding(Rounding{Operand: toBF16, Result: toBF16})
	out := tp.CausalAttention(q, k, v, 2, pos, 0)
	var plain Tape
	want := plain.CausalAttention(roundedCopy(q, false), roundedCopy(k, false), roundedCopy(v, false), 2, pos, 0)
	for i, x := range want.Data {
		if out.Data[i] != toBF16(x) {
			t.Fatalf("out[%d] = %v, want bf16(%v)", i, out.Data[i], x)
		}
	}
	var zero Tape
	zero.SetRounding(Rounding{})
	a, b := slices.Clone(plain.CausalAttention(q, k, v, 2, pos, 0).Data), zero.CausalAttention(q, k, v, 2, pos, 0).Data
	if !slices.Equal(a, b) {
		t.Fatal("the zero Rounding changed CausalAttention's output")
	}
}

// TestLossGradientsAsPyTorch: with float32 sums (Rounding.Stats), the
// losses' gradients round σ(x) and softmax's p before the target is
// subtracted, as PyTorch does, so that a well-predicted logit's gradient
// is the round-off of σ or p, here exactly 0; mod's own (float64 inside,
// one rounding) keeps the difference, 1 − σ(20) ≈ 2.1e-9 and 1 − p ≈
// 9.4e-14, to a few units of float64.
func TestLossGradientsAsPyTorch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		loss     func(tp *Tape, x *Tensor) *Tensor
		data     []float32
		at       int
		own      float64 // mod's gradient at x[at]
		pytorchs float32 // PyTorch's in float32
	}{
		{"BCEWithLogits", func(tp *Tape, x *Tensor) *Tensor { return tp.BCEWithLogits(x, []float32{1}, nil) },
			[]float32{20}, 0, -1 / (1 + math.Exp(20)), 0},
		{"CrossEntropy", func(tp *Tape, x *Tensor) *Tensor { return tp.CrossEntropy(x, []int{0}) },
			[]float32{30, 0}, 0, -math.Exp(-30) / (1 + math.Exp(-30)), 0},
	} {
		for _, stats := range []Stats{StatsFloat64, StatsTwoPass32} {
			var tp Tape
			tp.SetRounding(Rounding{Stats: stats})
			x := NewParam(1, len(tc.data), slices.Clone(tc.data))
			tp.Backward(tc.loss(&tp, x))
			got := x.Grad[tc.at]
			if stats != StatsFloat64 {
				if got != tc.pytorchs {
					t.Errorf("%s, float32 sums: gradient %.6g at %d, want PyTorch's %.6g", tc.name, got, tc.at, tc.pytorchs)
				}
				continue
			}
			// The difference of two values near 1 in float64 is good to
			// a few units of 1 (mod's exp kernel and the log-sum-exp
			// round at 1e-16 relative), not to the last bit of 9.4e-14.
			if d := math.Abs(float64(got) - tc.own); got == 0 || d > 0x1p-46 {
				t.Errorf("%s, float64 sums: gradient %.6g at %d, want %.6g (off by %.3g)", tc.name, got, tc.at, tc.own, d)
			}
		}
	}
}

// TestAccumulateInFormat checks Rounding.Accumulate on a sum whose bf16
// accumulation stops where float32's does not: 300 terms of 1 count
// exactly to 256 in bf16 (8 significant bits), where 256 + 1 rounds back
// to 256 (ties to even), while 300 itself is a bf16 value. MatMul's
// product (inner dimension 300) and its gradient with respect to b (a
// sum over a's 300 rows) accumulate in bf16 and stop at 256; a's gradient
// (dC·bᵀ, summed as dot products in float32 by the kernel emulated) and a
// product Accumulate declines do not.
func TestAccumulateInFormat(t *testing.T) {
	const n = 300
	ones := func(rows, cols int) *Tensor {
		x := New(rows, cols, nil)
		for i := range x.Data {
			x.Data[i] = 1
		}
		x.Grad = make([]float32, len(x.Data))
		return x
	}
	for _, c := range []struct {
		name       string
		accumulate func(m, k, n int) bool
		want       float32
	}{
		{"accumulated in bf16", func(m, k, n int) bool { return true }, 256},
		{"declined", func(m, k, n int) bool { return false }, n},
	} {
		var tp Tape
		tp.SetRounding(Rounding{Operand: toBF16, Result: toBF16, Accumulate: c.accumulate})
		a, b := ones(1, n), ones(n, 1)
		out := tp.MatMul(a, b)
		if out.Data[0] != c.want {
			t.Errorf("%s: a·b = %v, want %v", c.name, out.Data[0], c.want)
		}
		// b's gradient aᵀ·dC sums over a's rows: a as n×1, dC = 1.
		a2, b2 := ones(n, 1), ones(1, 1)
		out2 := tp.MatMul(a2, b2)
		up := make([]float32, n)
		for i := range up {
			up[i] = 1
		}
		tp.BackwardFrom(out2, up)
		if b2.Grad[0] != c.want {
			t.Errorf("%s: b's gradient aᵀ·dC = %v, want %v", c.name, b2.Grad[0], c.want)
		}
		for i, g := range a2.Grad {
			if g != 1 {
				t.Fatalf("%s: a's gradient [%d] = %v, want 1", c.name, i, g)
			}
		}
	}
}

// TestNormAffineSumsInFormat: NormAffine computes Add(Mul(x, gain), bias)
// bit for bit, and under a bf16 Store with NormSums its gain's and bias's
// gradients over 300 rows of ones stop at 256, as a sum in bf16 does
// (256 + 1 rounds back to 256); without NormSums, and for a Mul and Add
// not made by NormAffine, they are 300.
func TestNormAffineSumsInFormat(t *testing.T) {
	const rows = 300
	ones := func(rows int, grad bool) *Tensor {
		x := New(rows, 2, nil)
		for i := range x.Data {
			x.Data[i] = 1
		}
		if grad {
			x.Grad = make([]float32, len(x.Data))
		}
		return x
	}
	for _, c := range []struct {
		name     string
		normSums bool
		affine   bool
		want     float32
	}{
		{"NormAffine, sums in bf16", true, true, 256},
		{"NormAffine, sums in float64", false, true, rows},
		{"Add(Mul), NormSums set", true, false, rows},
	} {
		var tp Tape
		tp.SetRounding(Rounding{Store: toBF16, NormSums: c.normSums})
		x, gain, bias := ones(rows, false), ones(1, true), ones(1, true)
		var out *Tensor
		if c.affine {
			out = tp.NormAffine(x, gain, bias)
		} else {
			out = tp.Add(tp.Mul(x, gain), bias)
		}
		for i, v := range out.Data {
			if v != 2 {
				t.Fatalf("%s: output %v at %d, want 2", c.name, v, i)
			}
		}
		up := make([]float32, len(out.Data))
		for i := range up {
			up[i] = 1
		}
		tp.BackwardFrom(out, up)
		for k := range 2 {
			if gain.Grad[k] != c.want || bias.Grad[k] != c.want {
				t.Errorf("%s: gain gradient %v, bias gradient %v at %d, want %v", c.name, gain.Grad[k], bias.Grad[k], k, c.want)
			}
		}
	}
}
