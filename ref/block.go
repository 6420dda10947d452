package ref

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/internal/elem"
)

// RMSNorm is docs/spec.md §5: x / sqrt(mean(x^2) + eps) * gamma.
func RMSNorm(x, gamma []float64, eps float64) []float64 {
	y := make([]float64, len(x))
	rmsApply(y, x, gamma, rmsInv(x, eps))
	return y
}

// rmsInv is RMSNorm's 1/sqrt(mean(x^2) + eps).
func rmsInv(x []float64, eps float64) float64 {
	ms := 0.0
	for _, v := range x {
		ms += float64(v * v)
	}
	ms /= float64(len(x))
	return 1 / math.Sqrt(ms+eps)
}

// rmsApply sets y = x * inv * gamma.
func rmsApply(y, x, gamma []float64, inv float64) {
	for j, v := range x {
		y[j] = v * inv * gamma[j]
	}
}

// LayerNorm is docs/spec.md §5 (the option): (x - mean(x)) /
// sqrt(var(x) + eps) * gamma + beta, with the biased variance mean((x-mean)^2).
func LayerNorm(x, gamma, beta []float64, eps float64) []float64 {
	y := make([]float64, len(x))
	mean, inv := layerNormStats(x, eps)
	layerNormApply(y, x, gamma, beta, mean, inv)
	return y
}

// layerNormStats returns LayerNorm's mean(x) and 1/sqrt(var(x) + eps).
func layerNormStats(x []float64, eps float64) (mean, inv float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	variance := 0.0
	for _, v := range x {
		variance += float64((v - mean) * (v - mean))
	}
	variance /= float64(len(x))
	return mean, 1 / math.Sqrt(variance+eps)
}

// layerNormApply sets y = (x - mean) * inv * gamma + beta.
func layerNormApply(y, x, gamma, beta []float64, mean, inv float64) {
	for j, v := range x {
		y[j] = float64((v-mean)*inv*gamma[j]) + beta[j]
	}
}

// normalize applies the configured N with gain gamma and bias beta.
func normalize(c spec.BlockConfig, gamma, beta, x []float64) []float64 {
	if c.Norm == spec.NormLayer {
		return LayerNorm(x, gamma, beta, c.NormEps)
	}
	return RMSNorm(x, gamma, c.NormEps)
}

// RoPE is the rotary position embedding of docs/spec.md §5 for one head
// vector u (length d_h, even) at original position pos, in the "rotate-half"
// pairing (Llama, GPT-NeoX): coordinate j is paired with j + d_h/2, and for
// j < d_h/2 with theta_j = pos * base^(-2j/d_h),
//
//	u'_j         = u_j cos(theta_j) - u_{j+d_h/2} sin(theta_j)
//	u'_{j+d_h/2} = u_{j+d_h/2} cos(theta_j) + u_j sin(theta_j).
func RoPE(u []float64, pos int, base float64) []float64 {
	out := slices.Clone(u)
	rotate(out, ropeAngles(len(u), pos, base))
	return out
}

// rotate applies RoPE in place to one head vector u, given the angles' cos
// and sin interleaved (ropeAngles).
func rotate(u, cs []float64) {
	half := len(u) / 2
	for j := 0; j < half; j++ {
		cos, sin := cs[2*j], cs[2*j+1]
		a, b := u[j], u[j+half]
		u[j] = float64(a*cos) - float64(b*sin)
		u[j+half] = float64(b*cos) + float64(a*sin)
	}
}

// ropeAngles returns cos θ_j and sin θ_j, interleaved, for j < d_h/2 and
// θ_j = pos·base^(-2j/d_h), computed once for each (d_h, pos, base): the
// exact elementary functions are slow, and finite-difference passes call
// RoPE millions of times at a few positions.
func ropeAngles(dh, pos int, base float64) []float64 {
	key := ropeKey{dh, pos, base}
	if cs, ok := ropeTable.Load(key); ok {
		return cs.([]float64)
	}
	cs := make([]float64, dh/2*2)
	for j := 0; j < dh/2; j++ {
		theta := float64(pos) * elem.Pow(base, -2*float64(j)/float64(dh))
		cs[2*j], cs[2*j+1] = elem.Cos(theta), elem.Sin(theta)
	}
	ropeTable.Store(key, cs)
	return cs
}

type ropeKey struct {
	dh, pos int
	base    float64
}

// ropeTable caches ropeAngles by ropeKey.
var ropeTable sync.Map

// GELU is the erf form of docs/spec.md §5: 0.5 v (1 + erf(v / sqrt 2)).
func GELU(v float64) float64 {
	return 0.5 * v * (1 + elem.Erf(v/math.Sqrt2))
}

// vecMat returns x·W for a row vector x (length d_in) and W (d_in×d_out),
// summing over d_in in ascending order.
func vecMat(x []float64, w *mat.Dense) []float64 {
	din, dout := w.Dims()
	raw := w.RawMatrix()
	y := make([]float64, dout)
	for i := 0; i < din; i++ {
		row := raw.Data[i*raw.Stride : i*raw.Stride+dout]
		for j, wij := range row {
			y[j] += float64(x[i] * wij)
		}
	}
	return y
}

// MLP is docs/spec.md §5, the MLP applied to an already normalised row u:
// GELU: GELU(u·W1)·W2; SwiGLU: (SiLU(u·W1) * (u·W3))·W2.
func MLP(c spec.BlockConfig, p *BlockParams, u []float64) []float64 {
	hid := vecMat(u, p.W1)
	if c.MLP == spec.ActSwiGLU {
		gate := vecMat(u, p.W3)
		for j := range hid {
			hid[j] = SiLU(hid[j]) * gate[j]
		}
	} else {
		for j := range hid {
			hid[j] = GELU(hid[j])
		}
	}
	return vecMat(hid, p.W2)
}

// KVCache is the attention state of one layer: the rotated keys and the
// values of the tokens that went through that layer's attention, in
// ascending order of their original positions. Row t of Keys and Values is
// kv_heads·d_h wide (d without grouped-query attention), key and value head
// j in columns j*d_h .. (j+1)*d_h-1. During decoding in causal
// routing mode a routed layer's cache holds only the routed tokens (docs/spec.md
// §9); with a window w, only those of them at the last w positions (§13).
type KVCache struct {
	Positions []int       // original positions, strictly ascending
	Keys      [][]float64 // RoPE(N1(x)·Wk) at each position (no rotation with learned positions)
	Values    [][]float64 // N1(x)·Wv
}

// AttentionStep is one query of the causal multi-head attention of docs/spec.md
// §5: token x at original position pos is normalised (N1), projected to q,
// k, v (with their biases under QKVBias), rotated (RoPE at pos, unless
// Positions = learned), appended to the cache, and attends with scale
// 1/sqrt(d_h) to every cached token (all at positions <= pos); query head h
// reads key and value head h/(Heads/KVHeads) (grouped-query attention; head
// h itself without it). With a window w (c.Window > 0, docs/spec.md §13)
// the cached tokens at positions <= pos − w, outside this query's window and
// every later query's, are dropped from the cache first, so it attends to
// the positions in (pos − w, pos] and the cache holds at most w tokens. It
// returns the attention output ctx·Wo (the update a of H = X + a). pos must
// exceed every cached position; a smaller one is a programmer error and
// panics.
func (kv *KVCache) AttentionStep(c spec.BlockConfig, p *BlockParams, x []float64, pos int) []float64 {
	if n := len(kv.Positions); n > 0 && pos <= kv.Positions[n-1] {
		panic(fmt.Sprintf("ref: attention at position %d after position %d; positions must ascend", pos, kv.Positions[n-1]))
	}
	xn := normalize(c, p.Norm1, p.Norm1Bias, x)
	q, k, v := vecMat(xn, p.Wq), vecMat(xn, p.Wk), vecMat(xn, p.Wv)
	addBias(q, p.Bq)
	addBias(k, p.Bk)
	addBias(v, p.Bv)
	dh := c.D / c.Heads
	if c.Positions == spec.PositionRoPE {
		cs := ropeAngles(dh, pos, c.RoPEBase)
		for h := 0; h < c.Heads; h++ {
			rotate(q[h*dh:(h+1)*dh], cs)
		}
		for h := 0; h < c.KVHeadCount(); h++ {
			rotate(k[h*dh:(h+1)*dh], cs)
		}
	}
	kv.Positions = append(kv.Positions, pos)
	kv.Keys = append(kv.Keys, k)
	kv.Values = append(kv.Values, v)
	if c.Window > 0 {
		drop := 0
		for kv.Positions[drop] <= pos-c.Window {
			drop++
		}
		kv.Positions, kv.Keys, kv.Values = kv.Positions[drop:], kv.Keys[drop:], kv.Values[drop:]
	}

	ctx := make([]float64, c.D)
	scale := 1 / math.Sqrt(float64(dh))
	scores := make([]float64, len(kv.Keys))
	for h := 0; h < c.Heads; h++ {
		qh, ch := q[h*dh:(h+1)*dh], ctx[h*dh:(h+1)*dh]
		kvCol := kvHead(c, h) * dh
		for t, kt := range kv.Keys {
			s := 0.0
			for j, kj := range kt[kvCol : kvCol+dh] {
				s += float64(qh[j] * kj)
			}
			scores[t] = float64(s * scale)
		}
		softmaxInPlace(scores)
		for t, pt := range scores {
			for j, vj := range kv.Values[t][kvCol : kvCol+dh] {
				ch[j] += float64(pt * vj)
			}
		}
	}
	return vecMat(ctx, p.Wo)
}

// addBias adds the bias b (nil: none) to each row of x, whose rows are
// len(b) wide.
func addBias(x, b []float64) {
	if b == nil {
		return
	}
	for i := 0; i < len(x); i += len(b) {
		for j, bj := range b {
			x[i+j] += bj
		}
	}
}

// MLPUpdate is the second half of the block of docs/spec.md §5 for one
// row h of H: MLP(N2(h)).
func MLPUpdate(c spec.BlockConfig, p *BlockParams, h []float64) []float64 {
	return MLP(c, p, normalize(c, p.Norm2, p.Norm2Bias, h))
}

// BlockStep is the routed block of docs/spec.md §5 for one token at
// original position pos, given the cache of the tokens before it:
// a = Attn(N1(x)) (AttentionStep), h = x + a, and it returns the block's
// update f = Y - X = a + MLP(N2(h)), computed as that sum so that no
// cancellation x + ... - x enters.
func (kv *KVCache) BlockStep(c spec.BlockConfig, p *BlockParams, x []float64, pos int) []float64 {
	a, m := kv.BlockStepParts(c, p, x, pos)
	f := make([]float64, len(x))
	for j := range f {
		f[j] = a[j] + m[j]
	}
	return f
}

// BlockStepParts is BlockStep with the two halves of the update f kept
// apart: the attention's update a = Attn(N1(x)) (AttentionStep, which
// appends the token to the cache) and the MLP's update m = MLP(N2(x + a)).
// BlockStep's f is a + m. The halves let a deviation that weights them
// differently (docs/spec.md §11, weight_mlp_only) be built from ref.
func (kv *KVCache) BlockStepParts(c spec.BlockConfig, p *BlockParams, x []float64, pos int) (a, m []float64) {
	a = kv.AttentionStep(c, p, x, pos)
	h := make([]float64, len(x))
	for j := range x {
		h[j] = x[j] + a[j]
	}
	return a, MLPUpdate(c, p, h)
}

// checkPositions checks that a gathered set's positions ascend strictly and
// match its row count.
func checkPositions(x *mat.Dense, pos []int) error {
	n, _ := x.Dims()
	if len(pos) != n {
		return fmt.Errorf("block: %d positions for %d tokens, want one per token", len(pos), n)
	}
	for t := 1; t < len(pos); t++ {
		if pos[t] <= pos[t-1] {
			return fmt.Errorf("block: positions %d then %d are not strictly ascending; sort the selection before the block", pos[t-1], pos[t])
		}
	}
	return nil
}

// BlockUpdate is f(X~) of docs/spec.md §5: the pre-norm block applied to
// the gathered tokens X~ (n×d, one row per selected token) as a sequence of
// n tokens, with causal attention among them (with a window, among those at
// original positions in (p − w, p], docs/spec.md §13) and RoPE at their
// original positions pos (strictly ascending). It returns f = Y - X~ (n×d), the
// update without the outer residual. Beyond the golden cases' sizes it
// computes the whole sequence in matrix form, with the bits of BlockStep
// token by token (TestBlockUpdateIsTheCacheLoop).
func BlockUpdate(c spec.BlockConfig, p *BlockParams, x *mat.Dense, pos []int) (*mat.Dense, error) {
	if err := checkPositions(x, pos); err != nil {
		return nil, err
	}
	if !matrixFormPays(c, len(pos)) {
		var kv KVCache
		return byToken(x, func(t int) []float64 { return kv.BlockStep(c, p, x.RawRowView(t), pos[t]) }), nil
	}
	return blockForward(c, p, rawRows(x), pos).update(), nil
}

// byToken returns the matrix of x's shape whose row t is step(t), called
// for t = 0, 1, ... in order.
func byToken(x *mat.Dense, step func(t int) []float64) *mat.Dense {
	n, d := x.Dims()
	y := mat.NewDense(n, d, nil)
	for t := 0; t < n; t++ {
		y.SetRow(t, step(t))
	}
	return y
}

// matrixFormPays reports whether a block over n tokens is large enough for
// the matrix form to beat the token loop (at the golden cases' d = 8 the
// token loop is about 1.5 times faster); both give the same bits.
func matrixFormPays(c spec.BlockConfig, n int) bool {
	return n*c.D*(c.D+c.DFF) >= 1<<16
}

// AttentionUpdate is the attention half of the block alone, a = Attn(N1(X))
// for every row of x (n×d) at positions pos: the dense attention of the
// MLP-only routing variant (docs/spec.md §5). Its bits are AttentionStep's
// token by token.
func AttentionUpdate(c spec.BlockConfig, p *BlockParams, x *mat.Dense, pos []int) (*mat.Dense, error) {
	if err := checkPositions(x, pos); err != nil {
		return nil, err
	}
	if !matrixFormPays(c, len(pos)) {
		var kv KVCache
		return byToken(x, func(t int) []float64 { return kv.AttentionStep(c, p, x.RawRowView(t), pos[t]) }), nil
	}
	n, d := x.Dims()
	return mat.NewDense(n, d, attentionForward(c, p, rawRows(x), pos).a), nil
}
