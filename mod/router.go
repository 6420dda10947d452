package mod

import (
	"fmt"
	"math"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/spec"
)

// routerLogits returns r (docs/spec.md §2) for the rows xv of the valid
// tokens, whose flat rows are vidx: w·x (linear), w·x + b (linear_bias),
// ‖x‖₂ (l2norm) or the noise input (random), plus s·eps with jitter. It is
// len(vidx)×1.
//
//	xv: [len(vidx), d] → [len(vidx), 1]
func (l *Layer) routerLogits(tp *autograd.Tape, xv *autograd.Tensor, in LayerInputs, vidx []int) *autograd.Tensor {
	var r *autograd.Tensor
	switch l.cfg.Router {
	case spec.RouterLinear:
		r = tp.MatMul(xv, l.Router)
	case spec.RouterLinearBias:
		r = tp.Add(tp.MatMul(xv, l.Router), l.RouterBias)
	case spec.RouterL2Norm:
		r = l2Norm(tp, xv)
	case spec.RouterRandom:
		r = pick(tp, in.Noise, vidx, 1)
	}
	if s := l.cfg.Jitter; s > 0 {
		r = tp.Add(r, pick(tp, in.Jitter, vidx, float32(s)))
	}
	return r
}

// l2Norm returns ‖x_i‖₂ of every row, computed as m·‖x_i/m‖₂ with m the
// row's largest magnitude, so that Σx² cannot overflow float32 while ‖x‖
// itself is representable. m is a constant of the computation: the gradient
// m·(x/m²)/‖x/m‖ = x/‖x‖ is the norm's, exactly as without the scaling.
//
//	x: [N, d] → [N, 1]
func l2Norm(tp *autograd.Tape, x *autograd.Tensor) *autograd.Tensor {
	scale, inv := tp.Zeros(x.Rows, 1), tp.Zeros(x.Rows, 1)
	for i := range x.Rows {
		var m float32
		for _, v := range x.Row(i) {
			m = max(m, float32(math.Abs(float64(v))))
		}
		r := 1 / m
		if m == 0 || math.IsInf(float64(m), 0) || math.IsNaN(float64(m)) || math.IsInf(float64(r), 0) {
			m, r = 1, 1
		}
		scale.Data[i], inv.Data[i] = m, r
	}
	u := tp.Mul(x, inv)
	return tp.Mul(tp.Sqrt(tp.Sum(tp.Mul(u, u), 1)), scale)
}

// pick returns scale·v[k] for every k in idx, as a len(idx)×1 constant on
// the tape.
func pick(tp *autograd.Tape, v []float32, idx []int, scale float32) *autograd.Tensor {
	out := tp.Zeros(len(idx), 1)
	for j, k := range idx {
		out.Data[j] = scale * v[k]
	}
	return out
}

// checkField checks a per-token input: present with B·S values exactly when
// the configuration uses it.
func checkField(name string, v []float32, used bool, why string, n int) error {
	switch {
	case used && v == nil:
		return fmt.Errorf("%s is nil but %s needs it (B·S = %d N(0,1) draws)", name, why, n)
	case used && len(v) != n:
		return fmt.Errorf("%s has %d values, want B·S = %d", name, len(v), n)
	case !used && v != nil:
		return fmt.Errorf("%s is given but the configuration does not use it; pass nil", name)
	}
	return nil
}

// weights returns the output weight g of docs/spec.md §6 at every row of
// r (raw: r, sigmoid: σ(r), none: 1), and for softmax weighting the softmax
// of each sequence's selected router weights, one row per selected token
// (selIdx lists their flat rows, sequence after sequence; sel their
// positions).
//
//	r: [B·S, 1] → [B·S, 1] (softmax: [len(selIdx), 1])
func (l *Layer) weights(tp *autograd.Tape, r *autograd.Tensor, sel [][]int, selIdx []int) *autograd.Tensor {
	switch l.cfg.Weighting {
	case spec.WeightSigmoid:
		return tp.Sigmoid(r)
	case spec.WeightNone:
		ones := tp.Zeros(r.Rows, 1)
		for i := range ones.Data {
			ones.Data[i] = 1
		}
		return ones
	case spec.WeightSoftmax:
		if len(selIdx) == 0 {
			return tp.Zeros(0, 1)
		}
		rs := tp.GatherRows(r, selIdx)
		parts := autograd.Make[*autograd.Tensor](tp, len(sel))[:0]
		off := 0
		for _, p := range sel {
			k := len(p)
			if k == 0 {
				continue
			}
			row := tp.Reshape(tp.SliceRows(rs, off, off+k), 1, k)
			parts = append(parts, tp.Reshape(tp.Softmax(row), k, 1))
			off += k
		}
		return tp.ConcatRows(parts...)
	}
	return r // spec.WeightRaw
}
