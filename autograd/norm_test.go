package autograd

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// chainRMSNorm is the chain of operations RMSNorm replaces.
func chainRMSNorm(tp *Tape, x, gain *Tensor, eps float32) *Tensor {
	ms := tp.Mean(tp.Mul(x, x), 1)
	r := tp.Rsqrt(tp.AddScalar(ms, eps))
	return tp.Mul(tp.Mul(x, r), gain)
}

// rmsValue draws a float32 that is usually normal-sized and sometimes one of
// the values where the roundings and signs of the two forms could part: ±0,
// a subnormal, a value whose square overflows or underflows, ±Inf, NaN.
func rmsValue(rng *rand.Rand) float32 {
	switch rng.IntN(24) {
	case 0:
		return 0
	case 1:
		return float32(math.Copysign(0, -1))
	case 2:
		return 1e-40
	case 3:
		return -3e19
	case 4:
		return 2e-23
	case 5:
		return float32(math.Inf(1 - 2*rng.IntN(2)))
	case 6:
		return float32(math.NaN())
	}
	return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
}

// TestRMSNormIsTheChain checks RMSNorm's output and the gradients of x and
// of the gain against the chain it replaces, bit for bit (the sign of a
// zero included; a NaN matches any NaN), on rapid-drawn shapes, epsilons,
// inputs, upstream gradients and gradients already present in x and the
// gain, with either operand left without a gradient.
func TestRMSNormIsTheChain(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rows := rapid.IntRange(1, 9).Draw(rt, "rows")
		cols := rapid.IntRange(1, 70).Draw(rt, "cols")
		eps := rapid.SampledFrom([]float32{1e-6, 1e-5, 0, 1}).Draw(rt, "eps")
		special := rapid.Bool().Draw(rt, "special values")
		gradX := rapid.Bool().Draw(rt, "x has a gradient")
		gradGain := !gradX || rapid.Bool().Draw(rt, "gain has a gradient")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 7))
		vals := func(n int) []float32 {
			d := make([]float32, n)
			for i := range d {
				if special {
					d[i] = rmsValue(rng)
				} else {
					d[i] = float32(rng.NormFloat64())
				}
			}
			return d
		}
		xd, gd, up := vals(rows*cols), vals(cols), vals(rows*cols)
		x0, g0 := vals(rows*cols), vals(cols)
		tensor := func(rows, cols int, data, grad0 []float32, grad bool) *Tensor {
			if !grad {
				return New(rows, cols, append([]float32(nil), data...))
			}
			p := NewParam(rows, cols, append([]float32(nil), data...))
			copy(p.Grad, grad0)
			return p
		}
		run := func(f func(tp *Tape, x, gain *Tensor, eps float32) *Tensor) [3][]float32 {
			x := tensor(rows, cols, xd, x0, gradX)
			gain := tensor(1, cols, gd, g0, gradGain)
			var tp Tape
			out := f(&tp, x, gain, eps)
			tp.BackwardFrom(out, up)
			return [3][]float32{out.Data, x.Grad, gain.Grad}
		}
		got, want := run((*Tape).RMSNorm), run(chainRMSNorm)
		for n, name := range []string{"output", "dx", "dgain"} {
			if len(got[n]) != len(want[n]) {
				rt.Fatalf("%s: fused has %d values, chain %d", name, len(got[n]), len(want[n]))
			}
			for i, w := range want[n] {
				g := got[n][i]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					rt.Fatalf("%s[%d] (row %d, col %d): fused %v (%#08x), chain %v (%#08x)",
						name, i, i/cols, i%cols, g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		}
	})
}
