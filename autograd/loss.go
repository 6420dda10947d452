package autograd

import (
	"fmt"
	"math"

	"github.com/modref/modref/autograd/internal/kernel"
	"github.com/modref/modref/internal/elem"
)

// IgnoreIndex is the target value that CrossEntropy skips (a padded token).
const IgnoreIndex = -1

// CrossEntropy returns the mean over rows of -log softmax(logits)[target] as
// a 1×1 tensor. Row i of logits scores the classes for target[i]; rows whose
// target is IgnoreIndex are left out of the sum and the count. With no row
// counted the loss is 0. targets is copied.
func (tp *Tape) CrossEntropy(logits *Tensor, targets []int) *Tensor {
	if len(targets) != logits.Rows {
		panic(fmt.Sprintf("autograd.CrossEntropy: logits are %s but there are %d targets", logits.shape(), len(targets)))
	}
	out := tp.alloc(1, 1, needsGrad(logits))
	nd := tp.push(opCrossEntropy, out, logits, nil)
	e := tp.f64(logits.Cols)
	var sum float64
	var terms []float32 // the rows' losses, when summed in float32
	count := 0
	for i, c := range targets {
		if c == IgnoreIndex {
			continue
		}
		if c < 0 || c >= logits.Cols {
			panic(fmt.Sprintf("autograd.CrossEntropy: target %d of row %d out of range for %s", c, i, logits.shape()))
		}
		x := logits.Data[i*logits.Cols : (i+1)*logits.Cols]
		m, s := rowExpSum(x, e)
		l := m + elem.Log(s)
		// The row's log-sum-exp, kept in float64 for the backward pass.
		nd.saved = append(nd.saved, l)
		sum += l - float64(x[c])
		if tp.sums32() {
			term := float32(l - float64(x[c]))
			if f := tp.rounding.Store; f != nil {
				// log-sum-exp stored in the format, then the difference.
				term = f(f(float32(l)) - x[c])
			}
			terms = append(terms, term)
		}
		count++
	}
	out.Data[0] = float32(meanOf(sum, count))
	if tp.sums32() && count > 0 {
		out.Data[0] = pairwise32(terms) / float32(count)
	}
	if out.Grad == nil {
		tp.pop()
		return tp.store(out)
	}
	nd.count = count
	nd.idx = append(nd.idx, targets...)
	return tp.store(out)
}

func meanOf(sum float64, count int) float64 {
	if count == 0 {
		return 0
	}
	return sum / float64(count)
}

func (tp *Tape) backwardCrossEntropy(nd *node) {
	a := nd.a
	if a.Grad == nil || nd.count == 0 {
		return
	}
	// ∂/∂x_j = (softmax(x)_j - 1[j = target]) · g / count
	scale := float64(nd.out.Grad[0]) / float64(nd.count)
	lse := nd.saved
	// With float32 sums, each row as PyTorch computes it; else in float64.
	as32, r := tp.sums32(), tp.storeOrKeep()
	g, e := r(float32(scale)), tp.f64(a.Cols)
	for i, c := range nd.idx {
		if c == IgnoreIndex {
			continue
		}
		x := a.Data[i*a.Cols : (i+1)*a.Cols]
		da := a.Grad[i*a.Cols : (i+1)*a.Cols]
		l := lse[0]
		lse = lse[1:]
		if as32 {
			crossEntropyRow32(da, x, c, l, g, r)
			continue
		}
		kernel.ExpShifted(e, x, l)
		for j, p := range e {
			if j == c {
				p--
			}
			da[j] += float32(p * scale)
		}
	}
}

// crossEntropyRow32 adds a row's cross-entropy gradient to da as PyTorch
// computes it (log_softmax's backward after nll_loss's), each operation in
// float32 and stored by r: the log-probabilities o = x − lse stored, p =
// exp(o) stored, p·g, and g subtracted from it at the target c after the
// product, so that a row that predicts its target well (p ≈ 1) gets the
// round-off of p·g, about one unit of g, not of the difference.
func crossEntropyRow32(da, x []float32, c int, lse float64, g float32, r func(float32) float32) {
	for j, v := range x {
		o := r(float32(float64(v) - lse))
		q := r(float32(r(float32(elem.Exp(float64(o)))) * g))
		if j == c {
			q = r(q - g)
		}
		da[j] += q
	}
}

// BCEWithLogits returns the mean binary cross-entropy of logits x against
// targets t, in the stable form of docs/spec.md §8,
//
//	max(x, 0) - x·t + log(1 + exp(-|x|)),
//
// as a 1×1 tensor. targets has one value per element of x. valid, if not nil,
// has one entry per element and leaves out the false ones (padding) from the
// sum and the count; with none counted the loss is 0. targets and valid are
// copied. No gradient flows to the targets.
func (tp *Tape) BCEWithLogits(x *Tensor, targets []float32, valid []bool) *Tensor {
	if len(targets) != x.Len() || (valid != nil && len(valid) != x.Len()) {
		panic(fmt.Sprintf("autograd.BCEWithLogits: x is %s but there are %d targets and %d valid flags",
			x.shape(), len(targets), len(valid)))
	}
	out := tp.alloc(1, 1, needsGrad(x))
	var sum float64
	var terms []float32 // the elements' losses, when summed in float32
	count := 0
	for i, v := range x.Data {
		if valid != nil && !valid[i] {
			continue
		}
		z, t := float64(v), float64(targets[i])
		l := math.Max(z, 0) - float64(z*t) + elem.Log1p(elem.Exp(-math.Abs(z)))
		sum += l
		if f := tp.rounding.Store; f != nil {
			// PyTorch's form, (1 − t)·z + m + log(e^−m + e^(−z−m)) with
			// m = max(−z, 0), each operation in the format, as
			// binary_cross_entropy_with_logits computes it on tensors in
			// the format: the log of 1 + e^−|z| rounds to 0 once e^−|z|
			// is below the format's unit.
			m := max(-v, 0)
			a := f(f(float32((1-t)*z)) + m)
			e := f(f(float32(elem.Exp(float64(-m)))) + f(float32(elem.Exp(float64(f(-v-m))))))
			l = float64(f(a + f(float32(elem.Log(float64(e))))))
		}
		if tp.sums32() {
			terms = append(terms, float32(l))
		}
		count++
	}
	out.Data[0] = float32(meanOf(sum, count))
	if tp.sums32() && count > 0 {
		out.Data[0] = pairwise32(terms) / float32(count)
	}
	if out.Grad != nil {
		nd := tp.push(opBCEWithLogits, out, x, nil)
		nd.count = count
		nd.target = append(nd.target, targets...)
		if valid != nil {
			nd.mask = append(nd.mask, valid...)
		}
	}
	return tp.store(out)
}

func (tp *Tape) backwardBCE(nd *node) {
	x := nd.a
	if x.Grad == nil || nd.count == 0 {
		return
	}
	// ∂/∂x = (σ(x) - t) · g / count
	scale := float64(nd.out.Grad[0]) / float64(nd.count)
	if tp.sums32() {
		// PyTorch's binary_cross_entropy_with_logits backward, each
		// operation in float32 and stored as Rounding.Store says: σ(x)
		// rounded before t is subtracted, so that a token the logit
		// predicts well (σ(x) ≈ t) gets the round-off of σ, about one
		// unit of 1, not of the difference.
		r := tp.storeOrKeep()
		g := r(float32(scale))
		for i, v := range x.Data {
			if len(nd.mask) > 0 && !nd.mask[i] {
				continue
			}
			d := r(r(float32(sigmoid(float64(v)))) - nd.target[i])
			x.Grad[i] += r(float32(d * g))
		}
		return
	}
	for i, v := range x.Data {
		if len(nd.mask) > 0 && !nd.mask[i] {
			continue
		}
		x.Grad[i] += float32((sigmoid(float64(v)) - float64(nd.target[i])) * scale)
	}
}
