package ref

import (
	"math"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// Phi1 is the standard normal CDF at 1, so GELU(1) = Phi(1) and
// GELU(-1) = -(1 - Phi(1)).
const phi1 = 0.8413447460685429

func TestNormsHand(t *testing.T) {
	// mean(x^2) = (9+16)/2 = 12.5.
	r := math.Sqrt(12.5)
	assertClose(t, "RMSNorm", RMSNorm([]float64{3, 4}, []float64{1, 2}, 0), []float64{3 / r, 8 / r}, 1e-15)
	// mean 2, biased variance 1.
	assertClose(t, "LayerNorm", LayerNorm([]float64{1, 3}, []float64{1, 1}, []float64{0, 0.5}, 0), []float64{-1, 1.5}, 1e-15)
}

func TestRoPEHand(t *testing.T) {
	// d_h = 2, pos 1: theta = 1 rad, (1, 0) -> (cos 1, sin 1).
	assertClose(t, "RoPE d_h=2", RoPE([]float64{1, 0}, 1, 10000), []float64{math.Cos(1), math.Sin(1)}, 1e-15)
	// d_h = 4, pos 2, base 100: pairs (0,2) at theta 2, (1,3) at theta 2*100^(-1/2) = 0.2.
	c2, s2, c02, s02 := math.Cos(2), math.Sin(2), math.Cos(0.2), math.Sin(0.2)
	want := []float64{1*c2 - 3*s2, 2*c02 - 4*s02, 3*c2 + 1*s2, 4*c02 + 2*s02}
	assertClose(t, "RoPE d_h=4", RoPE([]float64{1, 2, 3, 4}, 2, 100), want, 1e-15)
	assertClose(t, "RoPE pos 0", RoPE([]float64{1, 2, 3, 4}, 0, 100), []float64{1, 2, 3, 4}, 0)
}

// q(pos a)·k(pos b) depends only on a - b: the property that makes the
// original positions of the selected tokens matter.
func TestRoPERelativeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dh := 2 * rapid.IntRange(1, 4).Draw(t, "half")
		u := make([]float64, dh)
		v := make([]float64, dh)
		for j := range u {
			u[j] = rapid.Float64Range(-2, 2).Draw(t, "u")
			v[j] = rapid.Float64Range(-2, 2).Draw(t, "v")
		}
		a := rapid.IntRange(0, 500).Draw(t, "a")
		b := rapid.IntRange(0, 500).Draw(t, "b")
		shift := rapid.IntRange(0, 500).Draw(t, "shift")
		dot := func(x, y []float64) float64 {
			s := 0.0
			for j := range x {
				s += x[j] * y[j]
			}
			return s
		}
		d1 := dot(RoPE(u, a, 10000), RoPE(v, b, 10000))
		d2 := dot(RoPE(u, a+shift, 10000), RoPE(v, b+shift, 10000))
		if math.Abs(d1-d2) > 1e-9 {
			t.Fatalf("rotated dot product changed under a shift: %v vs %v", d1, d2)
		}
	})
}

func TestMLPHand(t *testing.T) {
	id := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	p := &BlockParams{W1: id, W2: id, W3: id}
	c := spec.DefaultBlockConfig(2, 1, 2)
	assertScalar(t, "GELU(0)", GELU(0), 0, 0)
	assertClose(t, "GELU MLP", MLP(c, p, []float64{1, -1}), []float64{phi1, -(1 - phi1)}, 1e-15)
	// SwiGLU with identities: SiLU(u)*u; SiLU(1)*1 = sigma(1), SiLU(-1)*(-1) = sigma(-1).
	c.MLP = spec.ActSwiGLU
	s1 := 1 / (1 + math.Exp(-1))
	assertClose(t, "SwiGLU MLP", MLP(c, p, []float64{1, -1}), []float64{s1, 1 - s1}, 1e-15)
}

func eye(n int) *mat.Dense {
	m := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		m.Set(i, i, 1)
	}
	return m
}

// tinyBlock is a one-head d=2 block with identity value and output
// projections, unit norm gains and a zero MLP.
func tinyBlock(wqk float64) (spec.BlockConfig, *BlockParams) {
	c := spec.DefaultBlockConfig(2, 1, 2)
	c.NormEps = 1e-300 // the rows below have mean square exactly 1
	qk := mat.NewDense(2, 2, []float64{wqk, 0, 0, wqk})
	return c, &BlockParams{
		Norm1: []float64{1, 1}, Norm2: []float64{1, 1},
		Wq: qk, Wk: qk, Wv: eye(2), Wo: eye(2),
		W1: mat.NewDense(2, 2, nil), W2: eye(2),
	}
}

func TestAttentionCausalUniformHand(t *testing.T) {
	// Wq = Wk = 0: every score is 0, so token t averages the values of
	// tokens 0..t. Rows have mean square 1, so N1(x) = x and V = x.
	c, p := tinyBlock(0)
	x := mat.NewDense(3, 2, []float64{1, 1, 1, -1, -1, -1})
	f, err := BlockUpdate(c, p, x, []int{2, 5, 9})
	if err != nil {
		t.Fatal(err)
	}
	// MLP(N2(h)) = GELU(0·...)·W2 = 0, so f = a.
	want := []float64{1, 1, 1, 0, 1.0 / 3, -1.0 / 3}
	assertClose(t, "f", f.RawMatrix().Data, want, 1e-15)
}

func TestAttentionUsesOriginalPositionsHand(t *testing.T) {
	// Wq = Wk = I, one head of width 2: theta = pos. Tokens x0 = (1,1) at
	// position 3 and x1 = (1,-1) at position 5. The score of query 1 on key 0
	// is x1 · R(3-5) x0 / sqrt 2 = 2 sin 2 / sqrt 2; on itself |x1|^2/sqrt 2.
	c, p := tinyBlock(1)
	x := mat.NewDense(2, 2, []float64{1, 1, 1, -1})
	f, err := BlockUpdate(c, p, x, []int{3, 5})
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := 2*math.Sin(2)/math.Sqrt2, 2/math.Sqrt2
	p0 := math.Exp(s0) / (math.Exp(s0) + math.Exp(s1))
	p1 := 1 - p0
	want := []float64{1, 1, p0 + p1, p0 - p1}
	assertClose(t, "f", f.RawMatrix().Data, want, 1e-14)

	// Positions 0 and 1 (the gathered indices) give a different answer.
	g, _ := BlockUpdate(c, p, x, []int{0, 1})
	if closeTo(g.At(1, 1), f.At(1, 1), 1e-6) {
		t.Errorf("attention ignored the original positions: %v vs %v", g.At(1, 1), f.At(1, 1))
	}
	if _, err := BlockUpdate(c, p, x, []int{5, 3}); err == nil {
		t.Error("descending positions: no error")
	}
}

func TestBlockMLPHalfHand(t *testing.T) {
	// Wv = 0 makes a = 0, so f = MLP(N2(x)) with W1 = W2 = I and GELU:
	// x = (1,-1) has N2(x) = x, f = (Phi(1), -(1-Phi(1))).
	c, p := tinyBlock(0)
	p.Wv = mat.NewDense(2, 2, nil)
	p.W1 = eye(2)
	f, err := BlockUpdate(c, p, mat.NewDense(1, 2, []float64{1, -1}), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "f", f.RawMatrix().Data, []float64{phi1, -(1 - phi1)}, 1e-15)
}

func TestBlockStepPartsHand(t *testing.T) {
	// Wq = Wk = 0 and W1 = W2 = I: token t's attention update averages the
	// values of tokens 0..t, and its MLP update is GELU(N2(x + a)).
	// x0 = (1,1): a0 = (1,1), h0 = (2,2), N2(h0) = (1,1), m0 = (Φ(1), Φ(1)).
	// x1 = (1,-1): a1 = (1,0), h1 = (2,-1), N2(h1) = h1/√2.5.
	c, p := tinyBlock(0)
	p.W1 = eye(2)
	gelu := func(v float64) float64 { return v * 0.5 * (1 + math.Erf(v/math.Sqrt2)) }
	r := math.Sqrt(2.5)
	want := [][2][]float64{
		{{1, 1}, {phi1, phi1}},
		{{1, 0}, {gelu(2 / r), gelu(-1 / r)}},
	}
	x := [][]float64{{1, 1}, {1, -1}}
	var parts, whole KVCache
	for i := range x {
		a, m := parts.BlockStepParts(c, p, x[i], i)
		assertClose(t, "a", a, want[i][0], 1e-15)
		assertClose(t, "m", m, want[i][1], 1e-15)
		// BlockStep's f is the sum of the parts, bit for bit.
		f := whole.BlockStep(c, p, x[i], i)
		for j := range f {
			if f[j] != a[j]+m[j] {
				t.Errorf("token %d: f[%d] = %.17g, a + m = %.17g", i, j, f[j], a[j]+m[j])
			}
		}
	}
	if len(parts.Positions) != 2 {
		t.Errorf("BlockStepParts cached %d tokens, want 2", len(parts.Positions))
	}
}

func TestRMSNormFDMatchesClosedForm(t *testing.T) {
	x := []float64{0.7, -1.3, 0.4, 2.1}
	gamma := []float64{1.1, 0.9, -0.5, 1.3}
	const eps = 1e-6
	d := float64(len(x))
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	r := math.Sqrt(ms/d + eps)
	for j := range x {
		for i := range x {
			got, err := FDDerivative(func() (float64, error) { return RMSNorm(x, gamma, eps)[j], nil }, x, i, 0)
			if err != nil {
				t.Fatal(err)
			}
			// d y_j / d x_i = gamma_j (delta_ij / r - x_j x_i / (d r^3)).
			want := -gamma[j] * x[j] * x[i] / (d * r * r * r)
			if i == j {
				want += gamma[j] / r
			}
			if math.Abs(got-want) > 1e-8*math.Abs(want) {
				t.Errorf("dRMSNorm_%d/dx_%d: fd %.12g, closed form %.12g, relative difference %.3g", j, i, got, want, (got-want)/want)
			}
		}
	}
}
