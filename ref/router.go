package ref

import (
	"fmt"
	"math"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/internal/elem"
)

// RouterLinearWeight is docs/spec.md §2, router `linear` (paper Sec. 3.4):
// r = w·x, no bias, no nonlinearity, on the raw residual stream x.
func RouterLinearWeight(w, x []float64) float64 {
	r := 0.0
	for j := range w {
		r += float64(w[j] * x[j])
	}
	return r
}

// RouterLinearBiasWeight is docs/spec.md §2, router `linear_bias`:
// r = w·x + b.
func RouterLinearBiasWeight(w []float64, b float64, x []float64) float64 {
	return RouterLinearWeight(w, x) + b
}

// RouterL2NormWeight is docs/spec.md §2, router `l2norm`: r = ||x||_2.
func RouterL2NormWeight(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += float64(v * v)
	}
	return math.Sqrt(s)
}

// Jittered is docs/spec.md §2, jitter: r + s*eps, with eps an explicit
// N(0,1) draw.
func Jittered(r, s, eps float64) float64 {
	return r + float64(s*eps)
}

// RouterWeights computes the router weight r[b][i] of every position of every
// row (docs/spec.md §2), including padded positions (which are never
// selected). noise is the N(0,1) input of the random router (B×S, required
// for Router = random, otherwise nil); jitter is the eps input (B×S, required
// when cfg.Jitter > 0, otherwise nil).
func RouterWeights(cfg spec.Config, p *LayerParams, x []*mat.Dense, noise, jitter [][]float64) ([][]float64, error) {
	rows, s, err := batchShape("x", x, cfg.Block.D)
	if err != nil {
		return nil, err
	}
	if cfg.Router == spec.RouterRandom {
		if noise == nil {
			return nil, fmt.Errorf("router: Router = random needs the noise input (B×S = %d×%d of N(0,1) draws); it is nil", rows, s)
		}
		if err := checkShape2("router noise", noise, rows, s); err != nil {
			return nil, err
		}
	} else if noise != nil {
		return nil, fmt.Errorf("router: noise input given but Router = %q does not use it; pass nil", cfg.Router)
	}
	if cfg.Jitter > 0 {
		if jitter == nil {
			return nil, fmt.Errorf("router: Jitter = %v needs the jitter eps input (B×S = %d×%d of N(0,1) draws); it is nil", cfg.Jitter, rows, s)
		}
		if err := checkShape2("router jitter eps", jitter, rows, s); err != nil {
			return nil, err
		}
	} else if jitter != nil {
		return nil, fmt.Errorf("router: jitter eps input given but Jitter = 0; pass nil or set Jitter > 0")
	}
	r := make([][]float64, rows)
	for b := range r {
		r[b] = make([]float64, s)
		for i := 0; i < s; i++ {
			xi := x[b].RawRowView(i)
			switch cfg.Router {
			case spec.RouterLinear:
				r[b][i] = RouterLinearWeight(p.Router, xi)
			case spec.RouterLinearBias:
				r[b][i] = RouterLinearBiasWeight(p.Router, p.RouterBias[0], xi)
			case spec.RouterL2Norm:
				r[b][i] = RouterL2NormWeight(xi)
			case spec.RouterRandom:
				r[b][i] = noise[b][i]
			}
			if cfg.Jitter > 0 {
				r[b][i] = Jittered(r[b][i], cfg.Jitter, jitter[b][i])
			}
		}
	}
	return r, nil
}

// Sigmoid is the logistic function sigma(v) = 1/(1+exp(-v)), evaluated
// without overflow for either sign.
func Sigmoid(v float64) float64 {
	if v >= 0 {
		return 1 / (1 + elem.Exp(-v))
	}
	e := elem.Exp(v)
	return e / (1 + e)
}

// Softmax returns exp(v_j - max v) / sum_k exp(v_k - max v).
func Softmax(v []float64) []float64 {
	out := make([]float64, len(v))
	copy(out, v)
	softmaxInPlace(out)
	return out
}

// softmaxInPlace overwrites v with Softmax(v).
func softmaxInPlace(v []float64) {
	if len(v) == 0 {
		return
	}
	m := maxOf(v)
	sum := 0.0
	for j, x := range v {
		v[j] = elem.Exp(x - m)
		sum += v[j]
	}
	for j := range v {
		v[j] /= sum
	}
}

// maxOf is the fold m = math.Max(m, x) over v (non-empty), from v[0]. It
// compares first, which gives the fold's result unless a NaN occurs (the
// fold's result is then NaN) or the maximum is zero (the fold's is +0 if
// any zero is +0, the comparison keeps the first zero): those take the fold.
func maxOf(v []float64) float64 {
	m := v[0]
	nan := m != m
	for _, x := range v[1:] {
		if x > m {
			m = x
		}
		nan = nan || x != x
	}
	if !nan && m != 0 {
		return m
	}
	m = v[0]
	for _, x := range v[1:] {
		m = math.Max(m, x)
	}
	return m
}

// OutputWeights is docs/spec.md §6 (paper Eq. 1): the weight g[b][i] that
// multiplies the block's update. raw: g = r; sigmoid: g = sigma(r);
// none: g = 1; softmax: g_i = exp(r_i) / sum over the selected j of the same
// row of exp(r_j), and 0 for unselected tokens. raw, sigmoid and none give a
// value at every valid position (the dense compute of section 7 needs it);
// padded positions get 0.
func OutputWeights(w spec.Weighting, r [][]float64, sel Selection, valid []int) [][]float64 {
	g := make([][]float64, len(r))
	for b, row := range r {
		g[b] = make([]float64, len(row))
		v := validLen(valid, b, len(row))
		switch w {
		case spec.WeightRaw:
			copy(g[b][:v], row[:v])
		case spec.WeightSigmoid:
			for i := 0; i < v; i++ {
				g[b][i] = Sigmoid(row[i])
			}
		case spec.WeightNone:
			for i := 0; i < v; i++ {
				g[b][i] = 1
			}
		case spec.WeightSoftmax:
			pos := sel.Rows[b]
			rs := make([]float64, len(pos))
			for j, i := range pos {
				rs[j] = row[i]
			}
			for j, p := range Softmax(rs) {
				g[b][pos[j]] = p
			}
		default:
			panic(fmt.Sprintf("ref: OutputWeights with unknown weighting %q (Config.Validate rejects it)", w))
		}
	}
	return g
}

// StraightThroughOffsets returns sg(m_i g_i - g_i) of docs/spec.md §7, the
// constant that the straight-through weight adds to g. Freeze it once and
// pass it to StraightThroughWeights so that finite differences see
// dw/dg = 1.
func StraightThroughOffsets(g, m [][]float64) [][]float64 {
	off := make([][]float64, len(g))
	for b := range g {
		off[b] = make([]float64, len(g[b]))
		for i := range g[b] {
			off[b][i] = float64(m[b][i]*g[b][i]) - g[b][i]
		}
	}
	return off
}

// StraightThroughWeights is docs/spec.md §7: w_i = g_i + sg(m_i g_i - g_i),
// with the stop-gradient term passed in as the frozen offset. In the forward
// pass (offset computed from the same g) w equals m*g exactly: g + (g - g) = g
// and g + (0 - g) = 0 in floating point.
func StraightThroughWeights(g, offset [][]float64) [][]float64 {
	w := make([][]float64, len(g))
	for b := range g {
		w[b] = make([]float64, len(g[b]))
		for i := range g[b] {
			w[b][i] = g[b][i] + offset[b][i]
		}
	}
	return w
}

// batchShape checks a batch of activations (B matrices, each S×d) and returns
// B and S.
func batchShape(name string, x []*mat.Dense, d int) (rows, s int, err error) {
	if len(x) == 0 {
		return 0, 0, fmt.Errorf("%s: 0 batch rows, want B >= 1", name)
	}
	for b, xb := range x {
		if xb == nil {
			return 0, 0, fmt.Errorf("%s: batch row %d is nil", name, b)
		}
		r, c := xb.Dims()
		if b == 0 {
			s = r
		}
		if r != s || c != d {
			return 0, 0, fmt.Errorf("%s: batch row %d is %d×%d, want S×d = %d×%d", name, b, r, c, s, d)
		}
	}
	return len(x), s, nil
}
