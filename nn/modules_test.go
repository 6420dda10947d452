package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/modref/modref/autograd"
)

// last splits ms into the parameters and the input that follows them.
func last(ms []mat) (*params64, mat) {
	return &params64{ms[:len(ms)-1]}, ms[len(ms)-1]
}

func normCase(seed uint64, kind NormKind) gradCase {
	rng := rand.New(rand.NewPCG(seed, 1))
	n := newNorm(kind, 12)
	randomize(rng, n.Params())
	x := input(rng, 5, 12)
	return gradCase{
		ts:  append(n.Params(), x),
		f32: func(tp *autograd.Tape) *autograd.Tensor { return n.Forward(tp, x) },
		f64: func(ms []mat) mat {
			p, x := last(ms)
			return norm64(x, kind, p)
		},
	}
}

func ropeCase(seed uint64) gradCase {
	rng := rand.New(rand.NewPCG(seed, 2))
	const heads, dh = 2, 6
	pos := []int{0, 3, 4, 9, 1000}
	r := NewRoPE(dh)
	x := input(rng, heads*len(pos), dh)
	return gradCase{
		ts:  []*autograd.Tensor{x},
		f32: func(tp *autograd.Tape) *autograd.Tensor { return r.Apply(tp, x, pos) },
		f64: func(ms []mat) mat {
			out := newMat(ms[0].r, dh)
			for i := 0; i < out.r; i++ {
				copy(out.row(i), rope64(ms[0].row(i), pos[i%len(pos)], 10000))
			}
			return out
		},
	}
}

// subsetPos is a batch of four sequences holding subsets of their tokens:
// with gaps, empty, a single token.
var subsetPos = [][]int{{0, 2, 3, 7, 8}, {}, {1, 4, 5}, {6}}

func attentionCase(seed uint64, window int, bias bool) gradCase {
	rng := rand.New(rand.NewPCG(seed, 3))
	const d, heads = 12, 3
	a := NewAttention(d, heads, bias, rng)
	a.Window = window
	randomize(rng, a.Params())
	x := input(rng, 9, d)
	return gradCase{
		ts:  append(a.Params(), x),
		f32: func(tp *autograd.Tape) *autograd.Tensor { return a.Forward(tp, x, subsetPos) },
		f64: func(ms []mat) mat {
			p, x := last(ms)
			return attention64(x, subsetPos, p, heads, window, 10000, bias)
		},
	}
}

func mlpCase(seed uint64, act Activation, bias bool) gradCase {
	rng := rand.New(rand.NewPCG(seed, 4))
	m := NewMLP(12, 20, act, bias, rng)
	randomize(rng, m.Params())
	x := input(rng, 6, 12)
	return gradCase{
		ts:  append(m.Params(), x),
		f32: func(tp *autograd.Tape) *autograd.Tensor { return m.Forward(tp, x) },
		f64: func(ms []mat) mat {
			p, x := last(ms)
			return mlp64(x, p, act, bias)
		},
	}
}

// blockConfigs are the block variants under test.
func blockConfigs() []BlockConfig {
	return []BlockConfig{
		{D: 12, Heads: 3, DFF: 20},
		{D: 12, Heads: 3, DFF: 20, Norm: NormLayer, Act: ActSwiGLU, Window: 2, Bias: true},
		{D: 12, Heads: 2, DFF: 16, Norm: NormRMS, Act: ActSwiGLU, Window: 3, RoPEBase: 500},
	}
}

// blockCase checks Block.Forward, or Block.Update against Y − X.
func blockCase(seed uint64, cfg BlockConfig, update bool) gradCase {
	rng := rand.New(rand.NewPCG(seed, 5))
	b, err := NewBlock(cfg, rng)
	if err != nil {
		panic(err)
	}
	randomize(rng, b.Params())
	x := input(rng, 9, cfg.D)
	return gradCase{
		ts: append(b.Params(), x),
		f32: func(tp *autograd.Tape) *autograd.Tensor {
			if update {
				return b.Update(tp, x, subsetPos)
			}
			return b.Forward(tp, x, subsetPos)
		},
		f64: func(ms []mat) mat {
			p, x := last(ms)
			y := block64(x, subsetPos, p, cfg)
			if update {
				for i := range y.d {
					y.d[i] -= x.d[i]
				}
			}
			return y
		},
		sample: 40,
	}
}

// lmConfig is the tiny language model of the gradient checks.
func lmConfig(tie bool) Config {
	return Config{Vocab: 11, Layers: 2, Block: BlockConfig{D: 8, Heads: 2, DFF: 16}, TieEmbeddings: tie}
}

// lmBatch returns two sequences of five tokens, the next-token targets with
// the last of each row ignored, and the second row's last two tokens
// padding (ignored too).
func lmBatch(rng *rand.Rand, vocab int) (tokens, targets []int, pos [][]int) {
	const batch, seqLen = 2, 5
	tokens = make([]int, batch*seqLen)
	for i := range tokens {
		tokens[i] = rng.IntN(vocab)
	}
	targets = nextTokens(tokens, batch, seqLen)
	targets[seqLen+2], targets[seqLen+3] = autograd.IgnoreIndex, autograd.IgnoreIndex
	return tokens, targets, Positions(batch, seqLen)
}

// nextTokens returns each token's successor in its row, and IgnoreIndex for
// the last token of a row.
func nextTokens(tokens []int, batch, seqLen int) []int {
	targets := make([]int, len(tokens))
	for b := 0; b < batch; b++ {
		for s := 0; s < seqLen; s++ {
			i := b*seqLen + s
			targets[i] = autograd.IgnoreIndex
			if s+1 < seqLen {
				targets[i] = tokens[i+1]
			}
		}
	}
	return targets
}

func lmCase(seed uint64, tie bool) gradCase {
	rng := rand.New(rand.NewPCG(seed, 6))
	cfg := lmConfig(tie)
	m, err := NewLM(cfg, seed)
	if err != nil {
		panic(err)
	}
	randomize(rng, m.Params())
	tokens, targets, pos := lmBatch(rng, cfg.Vocab)
	return gradCase{
		ts:  m.Params(),
		f32: func(tp *autograd.Tape) *autograd.Tensor { return m.Loss(tp, tokens, pos, targets) },
		f64: func(ms []mat) mat {
			_, loss := lm64(tokens, pos, targets, &params64{ms}, cfg)
			return mat{1, 1, []float64{loss}}
		},
		sample: 30,
	}
}

// TestLayerNormNearlyEqualFeatures checks LayerNorm on rows whose features
// sit close together far from zero (σ ≈ 1e-3, μ ≈ 1e3): the standardised
// values are order one and must be within a few float32 roundings of the
// float64 formula. Centring in float32 (x − μ rounded to float32) would be
// off by about 2⁻²⁴·μ/σ ≈ 0.06.
func TestLayerNormNearlyEqualFeatures(t *testing.T) {
	const rows, d = 3, 8
	x := make([]float32, rows*d)
	for i := range x {
		x[i] = float32(1000 + 1e-3*math.Sin(float64(7*i+1)))
	}
	var tp autograd.Tape
	got := NewLayerNorm(d).Forward(&tp, autograd.New(rows, d, x)).Data
	for i := 0; i < rows; i++ {
		row := x[i*d : (i+1)*d]
		var mu, ss float64
		for _, v := range row {
			mu += float64(v)
		}
		mu /= d
		for _, v := range row {
			ss += (float64(v) - mu) * (float64(v) - mu)
		}
		for j, v := range row {
			want := (float64(v) - mu) / math.Sqrt(ss/d+1e-5)
			if diff := math.Abs(float64(got[i*d+j]) - want); diff > 1e-6 {
				t.Errorf("row %d feature %d: got %v, want %v: difference %.3g exceeds 1e-6", i, j, got[i*d+j], want, diff)
			}
		}
	}
}
