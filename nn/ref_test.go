package nn

import (
	"math"

	"github.com/modref/modref/autograd"
)

// This file is a float64 plain-loop transcription of docs/spec.md §5 and
// of the conventions in the package comment, written without the autograd
// engine, so that forwards can be compared with it and finite differences
// taken of it.

// mat is a row-major float64 matrix.
type mat struct {
	r, c int
	d    []float64
}

func newMat(r, c int) mat { return mat{r, c, make([]float64, r*c)} }

func (m mat) at(i, j int) float64 { return m.d[i*m.c+j] }

func (m mat) row(i int) []float64 { return m.d[i*m.c : (i+1)*m.c] }

// toMat returns a float64 copy of t's values.
func toMat(t *autograd.Tensor) mat {
	m := newMat(t.Rows, t.Cols)
	for i, v := range t.Data {
		m.d[i] = float64(v)
	}
	return m
}

// params64 hands out the float64 copies of a module's parameters, in the
// order its Params method lists them.
type params64 struct{ ms []mat }

func (p *params64) next() mat {
	m := p.ms[0]
	p.ms = p.ms[1:]
	return m
}

func matmul64(a, b mat) mat {
	out := newMat(a.r, b.c)
	for i := 0; i < a.r; i++ {
		for j := 0; j < b.c; j++ {
			var s float64
			for k := 0; k < a.c; k++ {
				s += a.at(i, k) * b.at(k, j)
			}
			out.d[i*b.c+j] = s
		}
	}
	return out
}

func add64(a, b mat) mat {
	out := newMat(a.r, a.c)
	for i := range out.d {
		out.d[i] = a.d[i] + b.d[i]
	}
	return out
}

// linear is a weight and its bias; b.d is nil for a map without bias.
type linear struct{ w, b mat }

// take returns the next weight (and bias) from p.
func (p *params64) take(bias bool) linear {
	l := linear{w: p.next()}
	if bias {
		l.b = p.next()
	}
	return l
}

// apply returns x·W + b.
func (l linear) apply(x mat) mat {
	y := matmul64(x, l.w)
	for i := 0; l.b.d != nil && i < y.r; i++ {
		for j := 0; j < y.c; j++ {
			y.d[i*y.c+j] += l.b.d[j]
		}
	}
	return y
}

func rmsnorm64(x, gain mat, eps float64) mat {
	out := newMat(x.r, x.c)
	for i := 0; i < x.r; i++ {
		var ms float64
		for _, v := range x.row(i) {
			ms += v * v
		}
		ms /= float64(x.c)
		for j, v := range x.row(i) {
			out.d[i*x.c+j] = v / math.Sqrt(ms+eps) * gain.d[j]
		}
	}
	return out
}

func layernorm64(x, gain, bias mat, eps float64) mat {
	out := newMat(x.r, x.c)
	for i := 0; i < x.r; i++ {
		var mu, vr float64
		for _, v := range x.row(i) {
			mu += v
		}
		mu /= float64(x.c)
		for _, v := range x.row(i) {
			vr += (v - mu) * (v - mu)
		}
		vr /= float64(x.c)
		for j, v := range x.row(i) {
			out.d[i*x.c+j] = (v-mu)/math.Sqrt(vr+eps)*gain.d[j] + bias.d[j]
		}
	}
	return out
}

func norm64(x mat, kind NormKind, p *params64) mat {
	if kind == NormLayer {
		g := p.next()
		return layernorm64(x, g, p.next(), 1e-5)
	}
	return rmsnorm64(x, p.next(), 1e-6)
}

// rope64 rotates one head vector v at position pos: dimension j pairs with
// j + d_h/2 and turns by pos·base^(−2j/d_h).
func rope64(v []float64, pos int, base float64) []float64 {
	dh := len(v)
	half := dh / 2
	out := make([]float64, dh)
	for j := 0; j < half; j++ {
		theta := float64(pos) * math.Pow(base, -2*float64(j)/float64(dh))
		c, s := math.Cos(theta), math.Sin(theta)
		out[j] = v[j]*c - v[j+half]*s
		out[j+half] = v[j+half]*c + v[j]*s
	}
	return out
}

// attention64 is causal multi-head attention over the stacked sequences of
// x at positions pos, taking Wq, Wk, Wv, Wo (with biases) from p.
func attention64(x mat, pos [][]int, p *params64, heads, window int, base float64, bias bool) mat {
	wq, wk, wv, wo := p.take(bias), p.take(bias), p.take(bias), p.take(bias)
	q, k, v := wq.apply(x), wk.apply(x), wv.apply(x)
	d := x.c
	dh := d / heads
	cat := newMat(x.r, d)
	off := 0
	for _, ps := range pos {
		for h := 0; h < heads; h++ {
			cols := func(m mat, i int) []float64 { return m.row(off + i)[h*dh : (h+1)*dh] }
			for i, pi := range ps {
				qi := rope64(cols(q, i), pi, base)
				// The keys a token may see: positions in (pi − window, pi].
				var js []int
				var scores []float64
				for j, pj := range ps {
					if pj > pi || (window > 0 && pi-pj >= window) {
						continue
					}
					kj := rope64(cols(k, j), pj, base)
					var s float64
					for t := range qi {
						s += qi[t] * kj[t]
					}
					js = append(js, j)
					scores = append(scores, s/math.Sqrt(float64(dh)))
				}
				mx := math.Inf(-1)
				for _, s := range scores {
					mx = math.Max(mx, s)
				}
				var z float64
				for _, s := range scores {
					z += math.Exp(s - mx)
				}
				o := cat.row(off + i)[h*dh : (h+1)*dh]
				for n, j := range js {
					w := math.Exp(scores[n]-mx) / z
					for t, vt := range cols(v, j) {
						o[t] += w * vt
					}
				}
			}
		}
		off += len(ps)
	}
	return wo.apply(cat)
}

func gelu64(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// mlp64 takes W1, W2 and, for SwiGLU, W3 (with biases) from p.
func mlp64(x mat, p *params64, act Activation, bias bool) mat {
	w1, w2 := p.take(bias), p.take(bias)
	h := w1.apply(x)
	if act == ActSwiGLU {
		g := p.take(bias).apply(x)
		for i := range h.d {
			h.d[i] = silu64(h.d[i]) * g.d[i]
		}
	} else {
		for i := range h.d {
			h.d[i] = gelu64(h.d[i])
		}
	}
	return w2.apply(h)
}

// block64 returns Y = H + MLP(N2(H)) with H = X + Attn(N1(X)).
func block64(x mat, pos [][]int, p *params64, cfg BlockConfig) mat {
	base := cfg.RoPEBase
	if base == 0 {
		base = 10000
	}
	h := add64(x, attention64(norm64(x, cfg.Norm, p), pos, p, cfg.Heads, cfg.Window, base, cfg.Bias))
	return add64(h, mlp64(norm64(h, cfg.Norm, p), p, cfg.Act, cfg.Bias))
}

// lm64 returns the logits of the language model and the mean cross-entropy
// over the targets that are not IgnoreIndex.
func lm64(tokens []int, pos [][]int, targets []int, p *params64, cfg Config) (mat, float64) {
	emb := p.next()
	x := newMat(len(tokens), cfg.Block.D)
	for i, t := range tokens {
		copy(x.row(i), emb.row(t))
	}
	for range cfg.Layers {
		x = block64(x, pos, p, cfg.Block)
	}
	x = norm64(x, cfg.Block.Norm, p)
	var logits mat
	if cfg.TieEmbeddings {
		logits = newMat(x.r, emb.r)
		for i := 0; i < x.r; i++ {
			for v := 0; v < emb.r; v++ {
				var s float64
				for j, xv := range x.row(i) {
					s += xv * emb.at(v, j)
				}
				logits.d[i*emb.r+v] = s
			}
		}
	} else {
		logits = p.take(false).apply(x)
	}
	var loss float64
	n := 0
	for i, t := range targets {
		if t == autograd.IgnoreIndex {
			continue
		}
		row := logits.row(i)
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		var z float64
		for _, v := range row {
			z += math.Exp(v - mx)
		}
		loss += mx + math.Log(z) - row[t]
		n++
	}
	return logits, loss / float64(n)
}
