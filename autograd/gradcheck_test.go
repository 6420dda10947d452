package autograd

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/diff/fd"
	"pgregory.net/rapid"
)

// m64 is a float64 matrix for the plain-loop reference forwards below, which
// are written independently of the engine so that the finite differences
// differentiate float64 arithmetic, not the float32 code under test.
type m64 struct {
	r, c int
	d    []float64
}

func (m m64) at(i, j int) float64 { return m.d[i*m.c+j] }

func newM64(r, c int) m64 { return m64{r, c, make([]float64, r*c)} }

// opCase is one operation under test, instantiated with concrete shapes and
// arguments drawn by rapid.
type opCase struct {
	shapes [][2]int
	// lo, hi bound the magnitude of input values: |x| in [lo, hi] with a
	// random sign, or x in [lo, hi] when positive is set.
	lo, hi   float64
	positive bool
	// noGrad lists inputs that are constants (integer-valued or masks).
	noGrad map[int]bool
	// abs, set for operations linear in each input taken alone (sums,
	// products of different inputs, copies), is the same computation on
	// magnitudes: every input replaced by its absolute value and every
	// subtraction by an addition, so that abs(|x|) is Σ|terms|, the scale of
	// float32 round-off in a sum that may cancel. Central differences of such
	// operations are also exact up to round-off whatever the step.
	abs func(in []m64) m64
	f32 func(tp *Tape, in []*Tensor) *Tensor
	f64 func(in []m64) m64
}

// magnitude draws the scale of the inputs: ordinary values, or large ones
// that exercise overflow-safe formulations.
func magnitude(t *rapid.T, large float64) float64 {
	return rapid.SampledFrom([]float64{1, 4, large}).Draw(t, "magnitude")
}

// dims draws a dimension, favouring 1 and lengths that are not multiples of
// the SIMD width (8 float32 lanes) alongside ones that are.
func dims(t *rapid.T, label string) int {
	return rapid.OneOf(rapid.IntRange(1, 3), rapid.IntRange(4, 19), rapid.SampledFrom([]int{8, 16, 32, 33})).Draw(t, label)
}

type opGen func(t *rapid.T) opCase

func elementwise(name string, f32 func(tp *Tape, a *Tensor) *Tensor, f func(float64) float64, lo, hi float64, positive bool) opGen {
	return func(t *rapid.T) opCase {
		r, c := dims(t, "rows"), dims(t, "cols")
		return opCase{
			shapes: [][2]int{{r, c}}, lo: lo, hi: hi, positive: positive,
			f32: func(tp *Tape, in []*Tensor) *Tensor { return f32(tp, in[0]) },
			f64: func(in []m64) m64 {
				out := newM64(in[0].r, in[0].c)
				for i, v := range in[0].d {
					out.d[i] = f(v)
				}
				return out
			},
		}
	}
}

func binaryCase(op string) opGen {
	return func(t *rapid.T) opCase {
		r, c := dims(t, "rows"), dims(t, "cols")
		bshape := rapid.SampledFrom([][2]int{{r, c}, {1, c}, {r, 1}, {1, 1}}).Draw(t, "bshape")
		return opCase{
			abs: func(in []m64) m64 {
				if op == "Sub" {
					return binary64("Add", absAll(in))
				}
				return binary64(op, absAll(in))
			},
			shapes: [][2]int{{r, c}, bshape}, lo: 0.1, hi: magnitude(t, 1e3),
			f32: func(tp *Tape, in []*Tensor) *Tensor {
				switch op {
				case "Add":
					return tp.Add(in[0], in[1])
				case "Sub":
					return tp.Sub(in[0], in[1])
				}
				return tp.Mul(in[0], in[1])
			},
			f64: func(in []m64) m64 { return binary64(op, in) },
		}
	}
}

// binary64 is the float64 reference of Add, Sub and Mul with broadcasting.
func binary64(op string, in []m64) m64 {
	a, b := in[0], in[1]
	out := newM64(a.r, a.c)
	for i := 0; i < a.r; i++ {
		for j := 0; j < a.c; j++ {
			x, y := a.at(i, j), b.at(min(i, b.r-1), min(j, b.c-1))
			switch op {
			case "Add":
				out.d[i*a.c+j] = x + y
			case "Sub":
				out.d[i*a.c+j] = x - y
			default:
				out.d[i*a.c+j] = x * y
			}
		}
	}
	return out
}

// absAll returns the inputs with every value replaced by its magnitude.
func absAll(in []m64) []m64 {
	out := make([]m64, len(in))
	for k, m := range in {
		out[k] = newM64(m.r, m.c)
		for i, v := range m.d {
			out[k].d[i] = math.Abs(v)
		}
	}
	return out
}

// onMagnitudes is the abs form of an operation without subtractions: the
// same computation on the magnitudes of its inputs.
func onMagnitudes(f func([]m64) m64) func([]m64) m64 {
	return func(in []m64) m64 { return f(absAll(in)) }
}

func matmulCase(variant string) opGen {
	return func(t *rapid.T) opCase {
		m, k, n := dims(t, "m"), dims(t, "k"), dims(t, "n")
		var sa, sb [2]int
		switch variant {
		case "NN":
			sa, sb = [2]int{m, k}, [2]int{k, n}
		case "NT":
			sa, sb = [2]int{m, k}, [2]int{n, k}
		case "TN":
			sa, sb = [2]int{k, m}, [2]int{k, n}
		}
		return opCase{
			shapes: [][2]int{sa, sb}, lo: 0, hi: magnitude(t, 1e3),
			f32: func(tp *Tape, in []*Tensor) *Tensor {
				switch variant {
				case "NN":
					return tp.MatMul(in[0], in[1])
				case "NT":
					return tp.MatMulNT(in[0], in[1])
				}
				return tp.MatMulTN(in[0], in[1])
			},
			f64: func(in []m64) m64 {
				a, b := in[0], in[1]
				out := newM64(m, n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s float64
						for p := 0; p < k; p++ {
							switch variant {
							case "NN":
								s += a.at(i, p) * b.at(p, j)
							case "NT":
								s += a.at(i, p) * b.at(j, p)
							default:
								s += a.at(p, i) * b.at(p, j)
							}
						}
						out.d[i*n+j] = s
					}
				}
				return out
			},
		}
	}
}

func reduceCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	axis := rapid.IntRange(-1, 1).Draw(t, "axis")
	mean := rapid.Bool().Draw(t, "mean")
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 1e4),
		f32: func(tp *Tape, in []*Tensor) *Tensor {
			switch {
			case axis < 0 && mean:
				return tp.MeanAll(in[0])
			case axis < 0:
				return tp.SumAll(in[0])
			case mean:
				return tp.Mean(in[0], axis)
			}
			return tp.Sum(in[0], axis)
		},
		f64: func(in []m64) m64 {
			a := in[0]
			out, n := newM64(1, 1), a.r*a.c
			switch axis {
			case 0:
				out, n = newM64(1, a.c), a.r
			case 1:
				out, n = newM64(a.r, 1), a.c
			}
			for i := 0; i < a.r; i++ {
				for j := 0; j < a.c; j++ {
					out.d[reduceIndex(axis, i, j)] += a.at(i, j)
				}
			}
			if mean {
				for k := range out.d {
					out.d[k] /= float64(n)
				}
			}
			return out
		},
	}
}

// softmax64 returns the softmax of x, or its logarithm.
func softmax64(x []float64, log bool) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	out := make([]float64, len(x))
	for j, v := range x {
		if log {
			out[j] = v - m - math.Log(s)
		} else {
			out[j] = math.Exp(v-m) / s
		}
	}
	return out
}

func softmaxCase(log bool) opGen {
	return func(t *rapid.T) opCase {
		r, c := dims(t, "rows"), dims(t, "cols")
		return opCase{
			shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 1e3),
			f32: func(tp *Tape, in []*Tensor) *Tensor {
				if log {
					return tp.LogSoftmax(in[0])
				}
				return tp.Softmax(in[0])
			},
			f64: func(in []m64) m64 {
				a := in[0]
				out := newM64(a.r, a.c)
				for i := 0; i < a.r; i++ {
					copy(out.d[i*a.c:], softmax64(a.d[i*a.c:(i+1)*a.c], log))
				}
				return out
			},
		}
	}
}

// standardizeCase draws rows for Standardize, with an eps from 0 to 1.
func standardizeCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	eps := rapid.SampledFrom([]float64{0, 1e-5, 1}).Draw(t, "eps")
	if c == 1 && eps == 0 {
		eps = 1e-5 // a one-element row has σ² = 0
	}
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0.1, hi: magnitude(t, 1e3),
		f32: func(tp *Tape, in []*Tensor) *Tensor { return tp.Standardize(in[0], eps) },
		f64: func(in []m64) m64 {
			a := in[0]
			out := newM64(a.r, a.c)
			for i := 0; i < a.r; i++ {
				x := a.d[i*a.c : (i+1)*a.c]
				var mu, ss float64
				for _, v := range x {
					mu += v
				}
				mu /= float64(a.c)
				for _, v := range x {
					ss += (v - mu) * (v - mu)
				}
				for j, v := range x {
					out.d[i*a.c+j] = (v - mu) / math.Sqrt(ss/float64(a.c)+eps)
				}
			}
			return out
		},
	}
}

func gatherCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	idx := rapid.SliceOfN(rapid.IntRange(0, r-1), 1, 2*r).Draw(t, "idx")
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: 10,
		f32: func(tp *Tape, in []*Tensor) *Tensor { return tp.GatherRows(in[0], idx) },
		f64: func(in []m64) m64 {
			out := newM64(len(idx), c)
			for k, i := range idx {
				copy(out.d[k*c:(k+1)*c], in[0].d[i*c:(i+1)*c])
			}
			return out
		},
	}
}

func scatterCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	idx := rapid.SliceOfN(rapid.IntRange(0, r-1), 1, 2*r).Draw(t, "idx")
	return opCase{
		shapes: [][2]int{{r, c}, {len(idx), c}}, lo: 0, hi: 10,
		f32: func(tp *Tape, in []*Tensor) *Tensor { return tp.ScatterAddRows(in[0], in[1], idx) },
		f64: func(in []m64) m64 {
			out := newM64(r, c)
			copy(out.d, in[0].d)
			for k, i := range idx {
				for j := 0; j < c; j++ {
					out.d[i*c+j] += in[1].at(k, j)
				}
			}
			return out
		},
	}
}

func sliceConcatCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	c0 := rapid.IntRange(0, c-1).Draw(t, "c0")
	c1 := rapid.IntRange(c0+1, c).Draw(t, "c1")
	r2, c2 := dims(t, "rows2"), dims(t, "cols2")
	// out = ConcatCols(SliceCols(a, c0, c1), ConcatRows(b, a)[:r] reshaped
	// back) exercises SliceCols, ConcatRows, ConcatCols, SliceRows and
	// Reshape in one function.
	return opCase{
		shapes: [][2]int{{r, c}, {r2, c}, {r, c2}}, lo: 0, hi: 10,
		f32: func(tp *Tape, in []*Tensor) *Tensor {
			stacked := tp.ConcatRows(in[1], in[0])
			back := tp.SliceRows(stacked, r2, r2+r)
			flat := tp.Reshape(back, 1, r*c)
			return tp.ConcatCols(tp.SliceCols(in[0], c0, c1), tp.Reshape(flat, r, c), in[2])
		},
		f64: func(in []m64) m64 {
			w := (c1 - c0) + c + c2
			out := newM64(r, w)
			for i := 0; i < r; i++ {
				row := out.d[i*w : (i+1)*w]
				n := copy(row, in[0].d[i*c+c0:i*c+c1])
				n += copy(row[n:], in[0].d[i*c:(i+1)*c])
				copy(row[n:], in[2].d[i*c2:(i+1)*c2])
			}
			return out
		},
	}
}

func headsCase(t *rapid.T) opCase {
	T, h, dh := dims(t, "T"), rapid.IntRange(1, 4).Draw(t, "h"), dims(t, "dh")
	// MergeHeads(Mul(SplitHeads(a), w)) with a weight per tall-layout element
	// checks that each permutation and its backward are mutual inverses.
	return opCase{
		shapes: [][2]int{{T, h * dh}, {h * T, dh}}, lo: 0, hi: 10,
		f32: func(tp *Tape, in []*Tensor) *Tensor {
			return tp.MergeHeads(tp.Mul(tp.SplitHeads(in[0], h), in[1]), h)
		},
		f64: func(in []m64) m64 {
			out := newM64(T, h*dh)
			for i := 0; i < T; i++ {
				for k := 0; k < h; k++ {
					for j := 0; j < dh; j++ {
						out.d[i*h*dh+k*dh+j] = in[0].at(i, k*dh+j) * in[1].at(k*T+i, j)
					}
				}
			}
			return out
		},
	}
}

func maskedSoftmaxCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	mask := make([]bool, r*c)
	for i := 0; i < r; i++ {
		keep := rapid.IntRange(0, c-1).Draw(t, "keep") // one unmasked entry per row
		for j := 0; j < c; j++ {
			mask[i*c+j] = j != keep && rapid.Bool().Draw(t, "masked")
		}
	}
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 100),
		f32: func(tp *Tape, in []*Tensor) *Tensor {
			return tp.Softmax(tp.MaskedFill(in[0], mask, float32(math.Inf(-1))))
		},
		f64: func(in []m64) m64 {
			out := newM64(r, c)
			for i := 0; i < r; i++ {
				x := make([]float64, c)
				for j := range x {
					x[j] = in[0].at(i, j)
					if mask[i*c+j] {
						x[j] = math.Inf(-1)
					}
				}
				copy(out.d[i*c:], softmax64(x, false))
			}
			return out
		},
	}
}

func crossEntropyCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "classes")
	targets := rapid.SliceOfN(rapid.IntRange(IgnoreIndex, c-1), r, r).Draw(t, "targets")
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 1e3),
		f32: func(tp *Tape, in []*Tensor) *Tensor { return tp.CrossEntropy(in[0], targets) },
		f64: func(in []m64) m64 {
			out := newM64(1, 1)
			n := 0
			for i, y := range targets {
				if y == IgnoreIndex {
					continue
				}
				out.d[0] -= softmax64(in[0].d[i*c:(i+1)*c], true)[y]
				n++
			}
			if n > 0 {
				out.d[0] /= float64(n)
			}
			return out
		},
	}
}

func bceCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	targets := make([]float32, r*c)
	for i := range targets {
		targets[i] = rapid.SampledFrom([]float32{0, 1, 0.25}).Draw(t, "target")
	}
	var valid []bool
	if rapid.Bool().Draw(t, "padded") {
		valid = rapid.SliceOfN(rapid.Bool(), r*c, r*c).Draw(t, "valid")
	}
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 100),
		f32: func(tp *Tape, in []*Tensor) *Tensor { return tp.BCEWithLogits(in[0], targets, valid) },
		f64: func(in []m64) m64 {
			// The textbook form -t log σ(x) - (1-t) log(1-σ(x)), in terms of
			// log σ(x) = -log(1+e^{-x}) so that it is exact for large |x|.
			out := newM64(1, 1)
			n := 0
			for i, x := range in[0].d {
				if valid != nil && !valid[i] {
					continue
				}
				logSig := -softplus(-x)
				logOneMinusSig := -softplus(x)
				tt := float64(targets[i])
				out.d[0] += -tt*logSig - (1-tt)*logOneMinusSig
				n++
			}
			if n > 0 {
				out.d[0] /= float64(n)
			}
			return out
		},
	}
}

// softplus returns log(1 + eˣ) without overflow.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

func scalarCase(t *rapid.T) opCase {
	r, c := dims(t, "rows"), dims(t, "cols")
	s := float32(rapid.Float64Range(-3, 3).Draw(t, "s"))
	shift := rapid.Bool().Draw(t, "shift")
	return opCase{
		shapes: [][2]int{{r, c}}, lo: 0, hi: magnitude(t, 1e3),
		f32: func(tp *Tape, in []*Tensor) *Tensor {
			if shift {
				return tp.AddScalar(in[0], s)
			}
			return tp.Scale(in[0], s)
		},
		abs: func(in []m64) m64 {
			out := newM64(in[0].r, in[0].c)
			for i, v := range in[0].d {
				if shift {
					out.d[i] = math.Abs(v) + math.Abs(float64(s))
				} else {
					out.d[i] = math.Abs(v) * math.Abs(float64(s))
				}
			}
			return out
		},
		f64: func(in []m64) m64 {
			out := newM64(in[0].r, in[0].c)
			for i, v := range in[0].d {
				if shift {
					out.d[i] = v + float64(s)
				} else {
					out.d[i] = v * float64(s)
				}
			}
			return out
		},
	}
}

func gelu64(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// linearOp marks an operation that is linear in each input taken alone and
// has no subtraction: its abs form is the same computation on magnitudes.
func linearOp(gen opGen) opGen {
	return func(t *rapid.T) opCase {
		oc := gen(t)
		oc.abs = onMagnitudes(oc.f64)
		return oc
	}
}

// opCases lists every operation with a backward pass.
var opCases = map[string]opGen{
	"Add":         binaryCase("Add"),
	"Sub":         binaryCase("Sub"),
	"Mul":         binaryCase("Mul"),
	"ScaleShift":  scalarCase,
	"Exp":         elementwise("Exp", (*Tape).Exp, math.Exp, 0, 60, false),
	"Log":         elementwise("Log", (*Tape).Log, math.Log, 1e-2, 1e4, true),
	"Sqrt":        elementwise("Sqrt", (*Tape).Sqrt, math.Sqrt, 1e-2, 1e4, true),
	"Rsqrt":       elementwise("Rsqrt", (*Tape).Rsqrt, func(x float64) float64 { return 1 / math.Sqrt(x) }, 1e-2, 1e4, true),
	"Sigmoid":     elementwise("Sigmoid", (*Tape).Sigmoid, sigmoid64, 0, 40, false),
	"SiLU":        elementwise("SiLU", (*Tape).SiLU, func(x float64) float64 { return x * sigmoid64(x) }, 0, 40, false),
	"GELU":        elementwise("GELU", (*Tape).GELU, gelu64, 0, 12, false),
	"MatMul":      linearOp(matmulCase("NN")),
	"MatMulNT":    linearOp(matmulCase("NT")),
	"MatMulTN":    linearOp(matmulCase("TN")),
	"Reduce":      linearOp(reduceCase),
	"Softmax":     softmaxCase(false),
	"LogSoftmax":  softmaxCase(true),
	"Gather":      linearOp(gatherCase),
	"ScatterAdd":  linearOp(scatterCase),
	"SliceConcat": linearOp(sliceConcatCase),
	"Heads":       linearOp(headsCase),
	"MaskedFill":  maskedSoftmaxCase,
	"CrossEnt":    crossEntropyCase,
	"BCE":         bceCase,
	"Standardize": standardizeCase,
}

// draw fills a tensor of the given shape with float32 values of magnitude in
// [lo, hi], positive or with random signs.
func draw(rng *rand.Rand, shape [2]int, oc opCase) []float32 {
	v := make([]float32, shape[0]*shape[1])
	for i := range v {
		x := oc.lo + (oc.hi-oc.lo)*rng.Float64()
		if !oc.positive && rng.IntN(2) == 0 {
			x = -x
		}
		v[i] = float32(x)
	}
	return v
}

// fdGradient returns the central finite-difference gradient of f at x, one
// coordinate at a time so that each step suits its coordinate.
//
// For a nonlinear f the step is h = 1e-6·max(|x_i|, 1): the truncation error,
// O(h²) relative to the scale on which f curves (|x_i| for log, sqrt and
// rsqrt, order one for the others), stays near 1e-12, and the round-off
// error, about 1e-16·|f|/h, near 1e-10 for the losses here. For an f linear in
// x (linear set), central differences have no truncation error at all, and
// the step is h = 1e-2·max(‖x‖∞, 1) to make the round-off error small even for
// a small coordinate next to large ones.
func fdGradient(f func([]float64) float64, x []float64, linear bool) []float64 {
	var norm float64
	for _, v := range x {
		norm = math.Max(norm, math.Abs(v))
	}
	g := make([]float64, len(x))
	xs := append([]float64(nil), x...)
	for i, xi := range x {
		step := 1e-6 * math.Max(math.Abs(xi), 1)
		if linear {
			step = 1e-2 * math.Max(norm, 1)
		}
		g[i] = fd.Derivative(func(h float64) float64 {
			xs[i] = h
			v := f(xs)
			xs[i] = xi
			return v
		}, xi, &fd.Settings{Formula: fd.Central, Step: step})
	}
	return g
}

// relErr returns ‖got − want‖∞ / max(scale, 1) and the index of the largest
// difference: a relative error for values of order one or more and an
// absolute one below, as an rtol = atol comparison would be. The scale is
// ‖want‖∞, or for a sum that may cancel the largest Σ|terms|.
func relErr(got []float32, want []float64, scale float64) (float64, int) {
	var maxDiff float64
	at := -1
	for i, w := range want {
		d := math.Abs(float64(got[i]) - w)
		if d > maxDiff || math.IsNaN(d) {
			maxDiff, at = d, i
		}
	}
	return maxDiff / math.Max(scale, 1), at
}

func maxAbs(v []float64) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// Tolerances on ‖float32 − float64‖∞ / max(scale, 1), the scale being
// ‖float64‖∞, or Σ|terms| for operations that sum (see relErr and opCase.abs).
// The worst errors TestMeasureOpErrors saw over 3000 rapid cases per
// operation were 2.1e-7 forward (MatMulNT) and 9.6e-7 for a gradient
// (LogSoftmax, whose gradient g − softmax·Σg cancels); each bound is about
// five times the worst seen. docs/tolerances.md has the table.
const (
	forwardTol = 1e-6
	gradTol    = 5e-6
)

// checkOp runs one drawn case: the forward against the float64 reference,
// and every input's gradient against central finite differences of the
// float64 reference. It returns the worst relative errors seen.
func checkOp(t *rapid.T, oc opCase, fwdTol, gTol float64) (fwd, grad float64) {
	rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
	in32 := make([]*Tensor, len(oc.shapes))
	in64 := make([]m64, len(oc.shapes))
	for k, s := range oc.shapes {
		v := draw(rng, s, oc)
		if oc.noGrad[k] {
			in32[k] = New(s[0], s[1], v)
		} else {
			in32[k] = NewParam(s[0], s[1], v)
		}
		in64[k] = m64{s[0], s[1], make([]float64, len(v))}
		for i, x := range v {
			in64[k].d[i] = float64(x)
		}
	}
	var tp Tape
	out := oc.f32(&tp, in32)
	want := oc.f64(in64)
	if out.Rows != want.r || out.Cols != want.c {
		t.Fatalf("forward shape %s, reference %dx%d", out.shape(), want.r, want.c)
	}
	scale := maxAbs(want.d)
	if oc.abs != nil {
		scale = maxAbs(oc.abs(in64).d)
	}
	fwd, at := relErr(out.Data, want.d, scale)
	if fwd > fwdTol {
		t.Fatalf("forward: relative error %.3g > %.3g at element %d: got %v, want %v",
			fwd, fwdTol, at, out.Data[at], want.d[at])
	}
	upstream := make([]float32, out.Len())
	up64 := make([]float64, out.Len())
	for i := range upstream {
		upstream[i] = float32(rng.NormFloat64())
		up64[i] = float64(upstream[i])
	}
	tp.BackwardFrom(out, upstream)
	for k := range oc.shapes {
		if oc.noGrad[k] {
			continue
		}
		loss := func(x []float64) float64 {
			args := append([]m64(nil), in64...)
			args[k] = m64{in64[k].r, in64[k].c, x}
			y := oc.f64(args)
			var s float64
			for i, v := range y.d {
				s += v * up64[i]
			}
			return s
		}
		g64 := fdGradient(loss, in64[k].d, oc.abs != nil)
		gscale := maxAbs(g64)
		if oc.abs != nil {
			// The gradient of Σ|upstream|·abs(|x|): Σ|terms| per element.
			mags := absAll(in64)
			lossAbs := func(x []float64) float64 {
				args := append([]m64(nil), mags...)
				args[k] = m64{mags[k].r, mags[k].c, x}
				var s float64
				for i, v := range oc.abs(args).d {
					s += v * math.Abs(up64[i])
				}
				return s
			}
			gscale = maxAbs(fdGradient(lossAbs, mags[k].d, true))
		}
		e, at := relErr(in32[k].Grad, g64, gscale)
		if e > gTol {
			t.Fatalf("gradient of input %d (%s): relative error %.3g > %.3g at element %d: got %v, finite differences %v",
				k, in32[k].shape(), e, gTol, at, in32[k].Grad[at], g64[at])
		}
		grad = math.Max(grad, e)
	}
	return fwd, grad
}

func TestGradients(t *testing.T) {
	for name, gen := range opCases {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { checkOp(rt, gen(rt), forwardTol, gradTol) })
		})
	}
}

// measure turns on the measurement tests: go test ./autograd -measure.
var measure = flag.Bool("measure", false, "run TestMeasureOpErrors, which prints the errors behind forwardTol and gradTol")

// TestMeasureOpErrors prints the worst errors seen per operation, the
// measurement behind forwardTol and gradTol (docs/tolerances.md). It runs
// with -measure (and -v to see its output from a package list):
// go test ./autograd -run TestMeasureOpErrors -measure -v.
func TestMeasureOpErrors(t *testing.T) {
	if !*measure {
		t.Skip("a measurement, not a check: run with -measure (go test ./autograd -run TestMeasureOpErrors -measure -v)")
	}
	for name, gen := range opCases {
		var worstF, worstG float64
		rapid.Check(t, func(rt *rapid.T) {
			f, g := checkOp(rt, gen(rt), math.Inf(1), math.Inf(1))
			worstF, worstG = math.Max(worstF, f), math.Max(worstG, g)
		})
		fmt.Printf("%-12s forward %.2e  gradient %.2e\n", name, worstF, worstG)
	}
}
