package autograd

import "github.com/modref/modref/autograd/internal/kernel"

// Rounding makes a tape emulate an implementation that computes in a
// low-precision format (bf16, fp16 or tf32 on a GPU) or that makes other
// choices than mod's own float32 arithmetic: the tensor cores read their
// operands in the format and accumulate in float32, an autocast
// implementation stores a product's result in the format, a pure
// low-precision one stores every tensor in it, and a float32 one computes
// LayerNorm's statistics and its losses' sums in float32. Each field is one
// such choice; the precision profiles' family of emulated implementations
// (mod/modcase, docs/tolerances.md) combines them.
//
// The zero Rounding, a tape's default, rounds nothing: mod's own
// arithmetic.
type Rounding struct {
	// Operand, when set, rounds every operand of a matrix product (MatMul,
	// MatMulNT, MatMulTN) and of CausalAttention (q, k and v) as the
	// product reads it: the operation runs on a rounded copy, and the
	// gradient that reaches the operand is rounded by the same function (a
	// low-precision tensor's gradient is stored in its format).
	Operand func(float32) float32
	// Result, when set, rounds the result of every matrix product and of
	// CausalAttention, and the gradient that flows back into it.
	Result func(float32) float32
	// Store, when set, rounds the output of every other operation that
	// computes values (elementwise operations, norms, softmax, reductions,
	// losses, rotations, scatters) and every gradient as the backward pass
	// reads it: an implementation whose every tensor is in the format
	// (PyTorch's module.to(torch.bfloat16)), computing inside each
	// operation in float32. Copies, gathers and views are not rounded
	// again: they move values already rounded.
	Store func(float32) float32
	// Stats, when not StatsFloat64, computes Standardize's mean and
	// variance in float32 (one-pass or two-pass, as Stats says) and its
	// output and backward pass in float32, and the reductions' and the
	// losses' sums in float32 by pairwise summation (as PyTorch's cascade
	// sums on a CPU and tree reductions on a GPU), instead of in float64.
	Stats Stats
	// Portable computes every matrix product and attention's products
	// with the bits of the Go loops (two roundings per step, no fused
	// multiply-add; on amd64, SIMD kernels that multiply and then add) on
	// every CPU instead of the fastest kernels this machine has, whose
	// bits differ between kernel paths (AVX-512 and AVX2 FMA against the
	// Go loops of other architectures): the tape's results are then the
	// same bits on every machine. The precision profiles' families use it for
	// the tolerances generated cases carry (docs/tolerances.md).
	Portable bool
	// RMSDivide computes RMSNorm as PyTorch code commonly writes it out,
	// x / sqrt(mean(x⊙x) + eps) ⊙ gain, each operation in float32 (the
	// mean a pairwise sum) and stored as Store says, and differentiates
	// that chain as PyTorch's autograd does (division, square root, mean,
	// square), instead of mod's x·rsqrt(·) with the mean of squares in
	// float64: at small widths, where RMSNorm's backward pass cancels,
	// the two forms' round-off differs by an order of magnitude.
	RMSDivide bool
	// Accumulate, when set, says of a product of an m×k and a k×n matrix
	// whether it accumulates in the format of Result instead of in
	// float32: each term a·b rounded by Result, and each partial sum, in
	// the order of k (s = Result(s + Result(a·b))), as PyTorch 1.13's
	// fallback CPU kernel for bf16 computes c += a·b with c, a and b in
	// bf16. It applies to MatMul's product and to its gradient with
	// respect to b, aᵀ·dC, a sum over a's rows; not to a's gradient dC·bᵀ,
	// which that kernel sums as dot products in float32, nor to MatMulNT,
	// MatMulTN and attention. Result must be set with it.
	Accumulate func(m, k, n int) bool
	// NormSums sums LayerNorm's gain and bias gradients over the rows in
	// the Store format, s = Store(s + Store(term)) (Tape.NormAffine), as
	// PyTorch's native layer_norm backward does in pure bf16 on a CPU,
	// instead of in float64 as every other broadcast operand's gradient.
	// It takes effect only with Store set.
	NormSums bool
}

// kernels returns the path of the tape's matrix products.
func (tp *Tape) kernels() kernel.Path {
	if tp.rounding.Portable {
		return kernel.Portable
	}
	return kernel.Fastest
}

// Stats says how Standardize computes a row's statistics (Rounding.Stats).
type Stats uint8

const (
	// StatsFloat64 is mod's own: mean and variance accumulated in float64
	// (the zero value).
	StatsFloat64 Stats = iota
	// StatsTwoPass32 computes the mean, then the mean of squared
	// deviations from it, in float32, as PyTorch's CPU kernel and Welford's
	// algorithm on a GPU compute them to within a rounding or so.
	StatsTwoPass32
	// StatsOnePass32 computes the variance as mean(x²) − mean(x)² in
	// float32, clamped at 0, as fused one-pass kernels do: it loses the
	// digits of a row whose features are nearly equal.
	StatsOnePass32
)

// SetRounding sets the rounding of the operations recorded from now on;
// the zero Rounding turns it off.
func (tp *Tape) SetRounding(r Rounding) { tp.rounding = r }

// Which rounding function an opRound node applies to the gradient (its
// arg).
const (
	roundOperand = iota
	roundResult
)

// operand returns t as a product reads it under the tape's rounding.
func (tp *Tape) operand(t *Tensor) *Tensor { return tp.round(t, roundOperand) }

// result returns a product's result as it is stored under the tape's
// rounding.
func (tp *Tape) result(t *Tensor) *Tensor { return tp.round(t, roundResult) }

// store rounds an operation's output in place as Rounding.Store says and
// returns it.
func (tp *Tape) store(out *Tensor) *Tensor {
	if f := tp.rounding.Store; f != nil {
		for i, v := range out.Data {
			out.Data[i] = f(v)
		}
	}
	return out
}

// storeGrad rounds the gradient of an operation's output in place, as
// Rounding.Store says, before the backward pass reads it.
func (tp *Tape) storeGrad(t *Tensor) {
	if f := tp.rounding.Store; f != nil {
		for i, v := range t.Grad {
			t.Grad[i] = f(v)
		}
	}
}

// storeOrKeep returns Rounding.Store, or when it is not set the identity
// (a float32 value kept as it is).
func (tp *Tape) storeOrKeep() func(float32) float32 {
	if f := tp.rounding.Store; f != nil {
		return f
	}
	return func(v float32) float32 { return v }
}

// sums32 reports whether reductions and losses sum in float32.
func (tp *Tape) sums32() bool { return tp.rounding.Stats != StatsFloat64 }

// pairwise32 returns the float32 sum of v by pairwise summation (blocks of
// eight summed in order, then halves summed recursively).
func pairwise32(v []float32) float32 {
	if len(v) <= 8 {
		var s float32
		for _, x := range v {
			s += x
		}
		return s
	}
	h := len(v) / 2
	return pairwise32(v[:h]) + pairwise32(v[h:])
}

// roundFunc returns the rounding function of kind which, nil when none.
func (tp *Tape) roundFunc(which int) func(float32) float32 {
	if which == roundOperand {
		return tp.rounding.Operand
	}
	return tp.rounding.Result
}

// round returns t itself when the tape has no rounding of that kind, and
// otherwise a rounded copy whose gradient, rounded again, is added into
// t's.
func (tp *Tape) round(t *Tensor, which int) *Tensor {
	f := tp.roundFunc(which)
	if f == nil {
		return t
	}
	out := tp.alloc(t.Rows, t.Cols, t.Grad != nil)
	for i, v := range t.Data {
		out.Data[i] = f(v)
	}
	if out.Grad != nil {
		nd := tp.push(opRound, out, t, nil)
		nd.arg = which
	}
	return out
}

// backwardRound adds the rounded gradient of a rounded copy into its
// source.
func (tp *Tape) backwardRound(nd *node) {
	f := tp.roundFunc(nd.arg)
	for i, g := range nd.out.Grad {
		nd.a.Grad[i] += f(g)
	}
}

// accumulates reports whether the tape accumulates a product of an m×k and
// a k×n matrix in the format of Rounding.Result (Rounding.Accumulate).
func (tp *Tape) accumulates(m, k, n int) bool {
	return tp.rounding.Accumulate != nil && tp.rounding.Accumulate(m, k, n)
}

// productInFormat sets dst (m×n) to a·b accumulated in the format r
// rounds to (Rounding.Accumulate): for every element, s = r(s + r(a_il ·
// b_lj)) for l = 0, …, k−1 from s = 0, each sum and product computed in
// float32 first, as PyTorch's bf16 arithmetic does. a is m×k, or k×m
// read transposed when aT; b is k×n.
func productInFormat(dst, a, b []float32, m, k, n int, aT bool, r func(float32) float32) {
	for i := range m {
		for j := range n {
			var s float32
			for l := range k {
				x := a[i*k+l]
				if aT {
					x = a[l*m+i]
				}
				s = r(s + r(x*b[l*n+j]))
			}
			dst[i*n+j] = s
		}
	}
}
