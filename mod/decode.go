package mod

import (
	"fmt"
	"math"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/spec"
)

// Decoder generates one sequence token by token in causal routing mode
// (docs/spec.md §9). Each layer has its own key-value cache: a routed
// layer's cache holds only the tokens routed through it, with their
// original positions; a dense layer's, and the attention of an MLP-only
// routed layer, every token. With a window w (spec.BlockConfig.Window,
// docs/spec.md §13) a cache keeps only the tokens at the last w positions,
// the only ones a later token can attend to. Its logits equal those of Model.Forward on the
// whole sequence, to float32 round-off.
type Decoder struct {
	m      *Model
	caches []kvCache
	pos    int
	tp     autograd.Tape
}

// kvCache is one layer's attention state: the original positions of the
// tokens it attended, and their rotated keys and values, d values each.
type kvCache struct {
	pos          []int
	keys, values []float32
}

// evict drops the cached tokens at positions <= last: with a window w and a
// query at position p, those at p − w and before, which neither this query
// nor any later one attends to (docs/spec.md §13). The survivors move to the
// front of the buffers, so a cache holds at most w tokens and its memory
// stays bounded however long the sequence.
func (c *kvCache) evict(last, d int) {
	n := 0
	for n < len(c.pos) && c.pos[n] <= last {
		n++
	}
	if n == 0 {
		return
	}
	c.pos = c.pos[:copy(c.pos, c.pos[n:])]
	c.keys = c.keys[:copy(c.keys, c.keys[n*d:])]
	c.values = c.values[:copy(c.values, c.values[n*d:])]
}

// StepResult is what one decoding step computes.
type StepResult struct {
	// Pos is the token's original position.
	Pos int
	// Logits are the next-token logits, one per vocabulary entry.
	Logits []float32
	// Routed reports per layer whether the token went through the layer's
	// block (always true for dense layers).
	Routed []bool
	// RouterLogits holds r per layer and PredictorLogits q per layer; NaN
	// where the layer has none (dense layers, layers without a predictor).
	RouterLogits, PredictorLogits []float32
}

// NewDecoder returns a decoder for m, or an error naming the first routed
// layer that cannot decode causally: its Causal must be router or
// predictor (top-k over a row needs the whole row), its router not random
// and its Jitter 0 (both are training inputs). The model's parameters are
// read at every step, not copied.
func NewDecoder(m *Model) (*Decoder, error) {
	for l, rl := range m.Layers {
		if rl == nil {
			continue
		}
		c := rl.cfg
		switch {
		case c.Causal == spec.CausalOff:
			return nil, fmt.Errorf("mod: decoder: layer %d has Causal = off; top-k over the row is not causal, set Causal = router or predictor (docs/spec.md §9)", l)
		case c.Router == spec.RouterRandom:
			return nil, fmt.Errorf("mod: decoder: layer %d has Router = random; its noise is a training input, decoding needs a deterministic router", l)
		case c.Jitter != 0:
			return nil, fmt.Errorf("mod: decoder: layer %d has Jitter = %v; jitter is training-only, set it to 0 for decoding", l, c.Jitter)
		}
	}
	return &Decoder{m: m, caches: make([]kvCache, len(m.Layers))}, nil
}

// Step feeds the next token and returns its logits. A routed layer routes
// the token iff r > 0 (Causal = router) or q > 0 (Causal = predictor),
// computed from the token's own residual stream; a routed token joins that
// layer's cache and becomes x + g·f, a skipped one keeps x and is never
// cached there.
//
//	token → Logits: [vocab]
func (dec *Decoder) Step(token int) (*StepResult, error) {
	m, pos := dec.m, dec.pos
	if token < 0 || token >= m.cfg.Vocab {
		return nil, fmt.Errorf("mod: decoder: token %d at position %d, want 0 <= id < vocab = %d", token, pos, m.cfg.Vocab)
	}
	if m.PosEmbed != nil && pos >= m.cfg.MaxLen {
		return nil, fmt.Errorf("mod: decoder: position %d has no learned position embedding (MaxLen = %d)", pos, m.cfg.MaxLen)
	}
	tp := &dec.tp
	tp.Reset()
	nl := len(m.Layers)
	res := &StepResult{Pos: pos, Routed: make([]bool, nl), RouterLogits: make([]float32, nl), PredictorLogits: make([]float32, nl)}
	x := m.Embed.Forward(tp, []int{token})
	if m.PosEmbed != nil {
		x = tp.Add(x, tp.GatherRows(m.PosEmbed, []int{pos}))
	}
	for l, rl := range m.Layers {
		c := &dec.caches[l]
		nan := float32(math.NaN())
		res.RouterLogits[l], res.PredictorLogits[l] = nan, nan
		if rl == nil {
			res.Routed[l] = true
			x = tp.Add(x, m.dense[l].step(tp, c, x, pos))
			continue
		}
		r := rl.routerLogits(tp, x, LayerInputs{}, []int{0})
		res.RouterLogits[l] = r.Data[0]
		score := r.Data[0]
		if rl.Predictor != nil {
			res.PredictorLogits[l] = rl.Predictor.Logits(tp, tp.StopGradient(x)).Data[0]
			if rl.cfg.Causal == spec.CausalPredictor {
				score = res.PredictorLogits[l]
			}
		}
		if math.IsNaN(float64(score)) {
			return nil, fmt.Errorf("mod: decoder: causal routing score is NaN at layer %d, position %d", l, pos)
		}
		routed := score > 0
		res.Routed[l] = routed
		g := rl.weights(tp, r, nil, nil)
		if rl.cfg.MLPOnly {
			x = tp.Add(x, rl.blk.attnStep(tp, c, x, pos))
			if routed {
				x = tp.Add(x, tp.Mul(rl.blk.MLPUpdate(tp, x), g))
			}
		} else if routed {
			x = tp.Add(x, tp.Mul(rl.blk.step(tp, c, x, pos), g))
		}
	}
	logits := m.Head.Forward(tp, m.Norm.Forward(tp, x))
	res.Logits = append([]float32(nil), logits.Data...)
	dec.pos++
	return res, nil
}

// step is the block's update f for one token x (1×d) at position pos, given
// the cache of the tokens before it, which it joins.
//
//	x: [1, d] → [1, d]
func (b *block) step(tp *autograd.Tape, c *kvCache, x *autograd.Tensor, pos int) *autograd.Tensor {
	a := b.attnStep(tp, c, x, pos)
	return tp.Add(a, b.MLPUpdate(tp, tp.Add(x, a)))
}

// attnStep is Attn(N1(x)) for one token x (1×d) at position pos: its query
// attends to the cached keys and to its own, which it appends to the cache
// with its value, in the order of operations of the full forward.
//
//	x: [1, d] → [1, d]
func (b *block) attnStep(tp *autograd.Tape, c *kvCache, x *autograd.Tensor, pos int) *autograd.Tensor {
	at := b.Attn
	h, d := at.Heads, x.Cols
	dh := d / h
	xn := b.N1.Forward(tp, x)
	q := tp.SplitHeads(at.Wq.Forward(tp, xn), h)
	k := tp.SplitHeads(at.Wk.Forward(tp, xn), h)
	if b.rope {
		q = at.RoPE.Apply(tp, q, []int{pos})
		k = at.RoPE.Apply(tp, k, []int{pos})
	}
	q = tp.Scale(q, float32(1/math.Sqrt(float64(dh))))
	// With one token, the h×d_h layout of SplitHeads is the 1×d layout.
	c.pos = append(c.pos, pos)
	c.keys = append(c.keys, k.Data...)
	c.values = append(c.values, at.Wv.Forward(tp, xn).Data...)
	if w := at.Window; w > 0 {
		c.evict(pos-w, d)
	}
	n := len(c.pos)
	keys := tp.SplitHeads(autograd.New(n, d, c.keys), h)
	values := tp.SplitHeads(autograd.New(n, d, c.values), h)
	b.parts = b.parts[:0]
	for hd := range h {
		b.parts = append(b.parts, tp.MatMulNT(tp.SliceRows(q, hd, hd+1), tp.SliceRows(keys, hd*n, (hd+1)*n)))
	}
	probs := tp.Softmax(tp.ConcatRows(b.parts...))
	b.parts = b.parts[:0]
	for hd := range h {
		b.parts = append(b.parts, tp.MatMul(tp.SliceRows(probs, hd, hd+1), tp.SliceRows(values, hd*n, (hd+1)*n)))
	}
	return at.Wo.Forward(tp, tp.ConcatCols(b.parts...))
}
