package nn

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/autograd"
	"gonum.org/v1/gonum/diff/fd"
)

// gradCase is one module under test: its float32 forward on the tensors ts
// (parameters, then the input when it is differentiable) and the float64
// reference of the same function on float64 copies of ts, in the same order.
type gradCase struct {
	ts  []*autograd.Tensor
	f32 func(tp *autograd.Tape) *autograd.Tensor
	f64 func(ms []mat) mat
	// sample is the number of coordinates per tensor whose gradient is
	// checked, drawn at random; 0 checks them all.
	sample int
}

// errs are the worst relative errors a gradCase run found.
type errs struct{ fwd, grad float64 }

func (e errs) max(o errs) errs { return errs{math.Max(e.fwd, o.fwd), math.Max(e.grad, o.grad)} }

// relErr returns ‖got − want‖∞ / max(‖want‖∞, 1) and the index of the
// largest difference.
func relErr(got, want []float64) (float64, int) {
	var diff, top float64
	at := -1
	for i, w := range want {
		d := math.Abs(got[i] - w)
		if d > diff || math.IsNaN(d) {
			diff, at = d, i
		}
		top = math.Max(top, math.Abs(w))
	}
	return diff / math.Max(top, 1), at
}

// run compares the forward with the reference, then backpropagates a random
// upstream gradient u and compares every tensor's gradient with central
// finite differences of Σ u ⊙ reference. It reports errors above the
// tolerances through t and returns the worst errors.
func (gc gradCase) run(t testing.TB, seed uint64, fwdTol, gradTol float64) errs {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, x := range gc.ts {
		x.ZeroGrad()
	}
	var tp autograd.Tape
	y := gc.f32(&tp)
	ms := make([]mat, len(gc.ts))
	for k, x := range gc.ts {
		ms[k] = toMat(x)
	}
	want := gc.f64(ms)
	if y.Rows != want.r || y.Cols != want.c {
		t.Fatalf("forward is %dx%d, reference %dx%d", y.Rows, y.Cols, want.r, want.c)
	}
	var e errs
	var at int
	e.fwd, at = relErr(toMat(y).d, want.d)
	if e.fwd > fwdTol {
		t.Errorf("forward: relative error %.3g > %.3g at element %d: %v, reference %v", e.fwd, fwdTol, at, y.Data[at], want.d[at])
	}
	u := make([]float32, y.Len())
	for i := range u {
		u[i] = float32(rng.NormFloat64())
	}
	tp.BackwardFrom(y, u)
	for k, x := range gc.ts {
		coords := rng.Perm(x.Len())
		if gc.sample > 0 && gc.sample < len(coords) {
			coords = coords[:gc.sample]
		}
		got, fdg := make([]float64, len(coords)), make([]float64, len(coords))
		for n, i := range coords {
			got[n] = float64(x.Grad[i])
			fdg[n] = fdPartial(func() float64 {
				out := gc.f64(clone(ms))
				var s float64
				for j, v := range out.d {
					s += v * float64(u[j])
				}
				return s
			}, ms[k].d, i)
		}
		g, at := relErr(got, fdg)
		if g > gradTol {
			t.Errorf("gradient of tensor %d (%dx%d): relative error %.3g > %.3g at element %d: %v, finite differences %v",
				k, x.Rows, x.Cols, g, gradTol, coords[at], got[at], fdg[at])
		}
		e.grad = math.Max(e.grad, g)
	}
	return e
}

// clone copies the matrices' values, so that a reference that writes into
// its arguments cannot change them.
func clone(ms []mat) []mat {
	out := make([]mat, len(ms))
	for k, m := range ms {
		out[k] = mat{m.r, m.c, append([]float64(nil), m.d...)}
	}
	return out
}

// fdPartial returns the central finite-difference derivative of f with
// respect to x[i], with the step 1e-6·max(|x_i|, 1) of autograd's gradient
// checks; x is restored afterwards.
func fdPartial(f func() float64, x []float64, i int) float64 {
	xi := x[i]
	d := fd.Derivative(func(h float64) float64 {
		x[i] = h
		v := f()
		x[i] = xi
		return v
	}, xi, &fd.Settings{Formula: fd.Central, Step: 1e-6 * math.Max(math.Abs(xi), 1)})
	return d
}

// randomize gives every parameter values that make the function under test
// far from trivial: 1×n parameters (gains, biases) 1 + 0.3·N(0, 1), matrices
// N(0, 1/rows).
func randomize(rng *rand.Rand, ps []*autograd.Tensor) {
	for _, p := range ps {
		for i := range p.Data {
			if p.Rows == 1 {
				p.Data[i] = float32(1 + 0.3*rng.NormFloat64())
			} else {
				p.Data[i] = float32(rng.NormFloat64() / math.Sqrt(float64(p.Rows)))
			}
		}
	}
}

// input returns an r×c differentiable input drawn from N(0, 1).
func input(rng *rand.Rand, r, c int) *autograd.Tensor {
	d := make([]float32, r*c)
	for i := range d {
		d[i] = float32(rng.NormFloat64())
	}
	return autograd.NewParam(r, c, d)
}

// Tolerances on ‖float32 − float64‖∞ / max(‖float64‖∞, 1). TestMeasureErrors
// (run it with -measure) measured the worst over 20 seeds of every case at
// 3.8e-7 for forwards and 1.7e-6 for gradients (against central finite
// differences, whose own error is below 1e-9 here); the tolerances leave a
// margin of about 8 for a change of matrix kernel or summation order, and are
// not to be loosened to make a test pass.
const (
	fwdTol  = 3e-6
	gradTol = 2e-5
)

// seeds is how many random instances of each case the checks run.
const seeds = 3

// cases returns every module case by name, built from seed.
func cases() map[string]func(seed uint64) gradCase {
	cs := map[string]func(uint64) gradCase{}
	for _, kind := range []NormKind{NormRMS, NormLayer} {
		cs["norm/"+string(kind)] = func(seed uint64) gradCase { return normCase(seed, kind) }
	}
	cs["rope"] = ropeCase
	for _, window := range []int{0, 3} {
		for _, bias := range []bool{false, true} {
			name := fmt.Sprintf("attention/window=%d/bias=%v", window, bias)
			cs[name] = func(seed uint64) gradCase { return attentionCase(seed, window, bias) }
		}
	}
	for _, act := range []Activation{ActGELU, ActSwiGLU} {
		for _, bias := range []bool{false, true} {
			name := fmt.Sprintf("mlp/%s/bias=%v", act, bias)
			cs[name] = func(seed uint64) gradCase { return mlpCase(seed, act, bias) }
		}
	}
	for i, cfg := range blockConfigs() {
		for _, update := range []bool{false, true} {
			name := fmt.Sprintf("block/config%d/update=%v", i, update)
			cs[name] = func(seed uint64) gradCase { return blockCase(seed, cfg, update) }
		}
	}
	for _, tie := range []bool{false, true} {
		cs[fmt.Sprintf("lm/tied=%v", tie)] = func(seed uint64) gradCase { return lmCase(seed, tie) }
	}
	return cs
}

func TestGradients(t *testing.T) {
	for name, c := range cases() {
		t.Run(name, func(t *testing.T) {
			for seed := uint64(1); seed <= seeds; seed++ {
				c(seed).run(t, seed, fwdTol, gradTol)
			}
		})
	}
}

// measure turns on the measurement tests: go test ./nn -measure.
var measure = flag.Bool("measure", false, "run TestMeasureErrors, which prints the errors behind fwdTol and gradTol")

// TestMeasureErrors prints the worst errors per case over many seeds, the
// measurement behind fwdTol and gradTol. It runs with -measure (and -v to
// see its output from a package list): go test ./nn -run TestMeasureErrors -measure -v.
func TestMeasureErrors(t *testing.T) {
	if !*measure {
		t.Skip("a measurement, not a check: run with -measure (go test ./nn -run TestMeasureErrors -measure -v)")
	}
	for name, c := range cases() {
		var worst errs
		for seed := uint64(1); seed <= 20; seed++ {
			worst = worst.max(c(seed).run(t, seed, math.Inf(1), math.Inf(1)))
		}
		fmt.Printf("%-45s forward %.2e  gradient %.2e\n", name, worst.fwd, worst.grad)
	}
}
