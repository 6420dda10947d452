package ref

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// ModelParams are a model's parameters. Layers[l] holds only the block for
// a dense layer.
type ModelParams struct {
	Embed         *mat.Dense // vocab×d
	PosEmbed      *mat.Dense // MaxLen×d learned position embeddings (nil with RoPE)
	Layers        []*LayerParams
	FinalNorm     []float64  // gamma, length d
	FinalNormBias []float64  // beta (LayerNorm only)
	Head          *mat.Dense // d×vocab
}

// NewModelParams draws a model's parameters from seed: token embeddings
// N(0,1), learned position embeddings (if any) N(0, 0.1^2),
// layers as NewLayerParams/NewBlockParams, final norm gains 1 + N(0, 0.1^2),
// head N(0, 1/d).
func NewModelParams(c spec.ModelConfig, seed uint64) *ModelParams {
	return newModelParams(c, NewRand(seed))
}

// ModelParamsShaped returns parameters of c's shapes without drawing them
// (the values NewLayerParams gives for a nil generator: every norm's gain
// 1, every other value 0), for a reader to fill with a case's values
// instead of drawing values it overwrites.
func ModelParamsShaped(c spec.ModelConfig) *ModelParams {
	return newModelParams(c, nil)
}

// newModelParams is NewModelParams drawing from rng (nil: not drawn).
func newModelParams(c spec.ModelConfig, rng *rand.Rand) *ModelParams {
	blk := c.Block()
	p := &ModelParams{Embed: RandomMatrix(rng, c.Vocab, blk.D, 1)}
	if blk.Positions == spec.PositionLearned {
		p.PosEmbed = RandomMatrix(rng, c.MaxLen, blk.D, 0.1)
	}
	for _, ml := range c.Layers {
		if ml.Routed {
			p.Layers = append(p.Layers, NewLayerParams(ml.Config, rng))
		} else {
			p.Layers = append(p.Layers, &LayerParams{Block: NewBlockParams(blk, rng)})
		}
	}
	p.FinalNorm = RandomVector(rng, blk.D, 1, 0.1)
	if blk.Norm == spec.NormLayer {
		p.FinalNormBias = RandomVector(rng, blk.D, 0, 0.1)
	}
	p.Head = RandomMatrix(rng, blk.D, c.Vocab, 1/math.Sqrt(float64(blk.D)))
	return p
}

// Tensors lists every parameter, named "Embed", "PosEmbed", "L<l>.<field>",
// "FinalNorm", "FinalNormBias", "Head", in that order (absent ones skipped).
func (p *ModelParams) Tensors() []Tensor {
	ts := []Tensor{denseTensor("Embed", p.Embed)}
	ts = appendMat(ts, "PosEmbed", p.PosEmbed)
	for l, lp := range p.Layers {
		ts = append(ts, lp.Tensors(fmt.Sprintf("L%d.", l))...)
	}
	ts = appendVec(ts, "FinalNorm", p.FinalNorm)
	ts = appendVec(ts, "FinalNormBias", p.FinalNormBias)
	return append(ts, denseTensor("Head", p.Head))
}

// Check reports the first parameter that does not match the configuration.
func (p *ModelParams) Check(c spec.ModelConfig) error {
	blk := c.Block()
	if err := checkMat("Embed", p.Embed, c.Vocab, blk.D, true); err != nil {
		return err
	}
	if err := checkMat("PosEmbed", p.PosEmbed, c.MaxLen, blk.D, blk.Positions == spec.PositionLearned); err != nil {
		return err
	}
	if len(p.Layers) != len(c.Layers) {
		return fmt.Errorf("params: %d layers, want %d", len(p.Layers), len(c.Layers))
	}
	for l, ml := range c.Layers {
		var err error
		if p.Layers[l] == nil {
			err = fmt.Errorf("params: nil")
		} else if ml.Routed {
			err = p.Layers[l].Check(ml.Config)
		} else {
			err = p.Layers[l].checkDense(blk)
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	if err := checkVec("FinalNorm", p.FinalNorm, blk.D, true); err != nil {
		return err
	}
	if err := checkVec("FinalNormBias", p.FinalNormBias, blk.D, blk.Norm == spec.NormLayer); err != nil {
		return err
	}
	return checkMat("Head", p.Head, blk.D, c.Vocab, true)
}

// IgnoreTarget marks a target position that the cross-entropy skips.
const IgnoreTarget = -1

// ModelInputs are the data a model reads.
type ModelInputs struct {
	Tokens  [][]int       // B×S token ids
	Targets [][]int       // B×S next-token ids; IgnoreTarget to skip a position
	Valid   []int         // V_b valid tokens per row; nil: all valid
	Noise   [][][]float64 // per layer: the random router's B×S noise, nil where unused
	Jitter  [][][]float64 // per layer: the jitter eps, nil where unused
}

// ModelFrozen holds one Frozen per layer (zero for dense layers).
type ModelFrozen struct {
	Layers []Frozen
}

// ModelResult is everything a model forward computes.
type ModelResult struct {
	Logits []*mat.Dense   // B matrices S×vocab (rows at padded positions are computed but unused)
	Layers []*LayerResult // per layer; nil for a dense layer
	CE     float64        // mean cross-entropy over valid positions with a target
	Aux    float64        // sum of the routed layers' AuxLoss
	Loss   float64        // CE + Aux
	FLOPs  ModelFLOPs     // per layer, total, dense model, ratio
	Frozen ModelFrozen    // decisions and constants to replay with ModelForwardFrozen
	Hidden []*mat.Dense   // residual stream after the last layer, before the final norm

	acts modelActs // for ModelGradients; empty otherwise
}

// modelActs are a model forward's values that the backward pass reads.
type modelActs struct {
	inputs [][]*mat.Dense // per layer, its input X (B×S×d)
	dense  [][]*blockActs // per layer, per batch row, a dense layer's block values (nil for routed layers)
	final  []normStats    // per batch row, the final norm's statistics
	u      [][]float64    // per batch row, the final norm's output (S×d)
	backs  []LayerBack    // per layer, a stepped routed layer's backward (ModelGradientsThrough)
}

// DenseLayerForward is a dense (non-routed) layer: out_i = x_i + f_i(X) over
// the V_b valid tokens of each row (docs/spec.md §5 with every token
// selected and weight 1); padded positions keep x.
func DenseLayerForward(c spec.BlockConfig, p *BlockParams, x []*mat.Dense, valid []int) ([]*mat.Dense, error) {
	out, _, err := denseLayer(c, p, x, valid, false)
	return out, err
}

// denseLayer is DenseLayerForward, with keep also returning each batch
// row's block values for the backward pass (nil for a row with no valid
// token).
func denseLayer(c spec.BlockConfig, p *BlockParams, x []*mat.Dense, valid []int, keep bool) ([]*mat.Dense, []*blockActs, error) {
	rows, s, err := batchShape("dense layer input", x, c.D)
	if err != nil {
		return nil, nil, err
	}
	if err := checkValid(valid, rows, s); err != nil {
		return nil, nil, err
	}
	out := make([]*mat.Dense, rows)
	acts := make([]*blockActs, rows)
	for b, xb := range x {
		out[b] = mat.DenseCopyOf(xb)
		v := validLen(valid, b, s)
		if v == 0 {
			continue
		}
		var f *mat.Dense
		if keep {
			acts[b] = blockForward(c, p, rawRows(GatherRows(xb, iota(v))), iota(v))
			f = acts[b].update()
		} else if f, err = BlockUpdate(c, p, GatherRows(xb, iota(v)), iota(v)); err != nil {
			return nil, nil, fmt.Errorf("dense layer row %d: %w", b, err)
		}
		for i := 0; i < v; i++ {
			for j := 0; j < c.D; j++ {
				out[b].Set(i, j, xb.At(i, j)+f.At(i, j))
			}
		}
	}
	return out, acts, nil
}

// EmbedToken is the input residual stream of a token at position pos:
// Embed[token], plus PosEmbed[pos] with learned position embeddings.
func EmbedToken(p *ModelParams, token, pos int) []float64 {
	x := append([]float64(nil), p.Embed.RawRowView(token)...)
	if p.PosEmbed != nil {
		for j, v := range p.PosEmbed.RawRowView(pos) {
			x[j] += v
		}
	}
	return x
}

// Embed applies EmbedToken to every valid position: B matrices S×d
// (padded positions get zero rows).
func Embed(p *ModelParams, tokens [][]int, valid []int) []*mat.Dense {
	_, d := p.Embed.Dims()
	x := make([]*mat.Dense, len(tokens))
	for b, row := range tokens {
		x[b] = mat.NewDense(len(row), d, nil)
		for i := 0; i < validLen(valid, b, len(row)); i++ {
			x[b].SetRow(i, EmbedToken(p, row[i], i))
		}
	}
	return x
}

// HeadLogits is the final norm and LM head for one residual row x:
// N(x)·Head.
func HeadLogits(c spec.BlockConfig, p *ModelParams, x []float64) []float64 {
	return vecMat(normalize(c, p.FinalNorm, p.FinalNormBias, x), p.Head)
}

// ModelForward is the whole language model (docs/spec.md §10): embedding,
// each layer (dense, or routed with its own decision), final norm, head,
// cross-entropy, and the routed layers' auxiliary losses.
func ModelForward(c spec.ModelConfig, p *ModelParams, in ModelInputs) (*ModelResult, error) {
	return modelForward(c, p, in, nil, nil, false)
}

// ModelForwardFrozen is ModelForward with every routed layer's decision and
// stop-gradient constants taken from fz (from an earlier result's Frozen):
// the function to differentiate with finite differences.
func ModelForwardFrozen(c spec.ModelConfig, p *ModelParams, in ModelInputs, fz ModelFrozen) (*ModelResult, error) {
	if len(fz.Layers) != len(c.Layers) {
		return nil, fmt.Errorf("model: frozen decisions for %d layers, want %d", len(fz.Layers), len(c.Layers))
	}
	return modelForward(c, p, in, &fz, nil, false)
}

func perLayer(name string, a [][][]float64, nLayers int) error {
	if a != nil && len(a) != nLayers {
		return fmt.Errorf("model: %s has %d entries, want one per layer (%d; nil where unused)", name, len(a), nLayers)
	}
	return nil
}

func layerField(a [][][]float64, l int) [][]float64 {
	if a == nil {
		return nil
	}
	return a[l]
}

// modelForward is ModelForward, with the decisions of fz when it is not
// nil, and with keep also the values the backward pass reads
// (ModelResult.acts).
func modelForward(c spec.ModelConfig, p *ModelParams, in ModelInputs, fz *ModelFrozen, step LayerStep, keep bool) (*ModelResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("model: params are nil")
	}
	if err := p.Check(c); err != nil {
		return nil, fmt.Errorf("model %w", err)
	}
	if len(in.Tokens) == 0 {
		return nil, fmt.Errorf("model: Tokens has 0 rows, want B >= 1")
	}
	rows, s := len(in.Tokens), len(in.Tokens[0])
	if s == 0 {
		return nil, fmt.Errorf("model: Tokens rows are empty, want S >= 1")
	}
	if blk := c.Block(); blk.Positions == spec.PositionLearned && s > c.MaxLen {
		return nil, fmt.Errorf("model: sequence length S = %d exceeds MaxLen = %d learned position embeddings", s, c.MaxLen)
	}
	if err := checkValid(in.Valid, rows, s); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := checkTokens("Tokens", in.Tokens, rows, s, c.Vocab, in.Valid); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := checkTargets(in.Targets, rows, s, c.Vocab, in.Valid); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := perLayer("Noise", in.Noise, len(c.Layers)); err != nil {
		return nil, err
	}
	if err := perLayer("Jitter", in.Jitter, len(c.Layers)); err != nil {
		return nil, err
	}
	blk := c.Block()
	res := &ModelResult{Layers: make([]*LayerResult, len(c.Layers)), Frozen: ModelFrozen{Layers: make([]Frozen, len(c.Layers))}}
	lengths := make([]int, rows)
	for b := range lengths {
		lengths[b] = validLen(in.Valid, b, s)
	}
	x := Embed(p, in.Tokens, in.Valid)
	for l, ml := range c.Layers {
		if !ml.Routed {
			if layerField(in.Noise, l) != nil || layerField(in.Jitter, l) != nil {
				return nil, fmt.Errorf("model: layer %d is dense but has noise or jitter input; pass nil", l)
			}
			xin := x
			var acts []*blockActs
			var err error
			x, acts, err = denseLayer(blk, &p.Layers[l].Block, x, in.Valid, keep)
			if err != nil {
				return nil, fmt.Errorf("model: layer %d: %w", l, err)
			}
			if keep {
				res.acts.inputs = append(res.acts.inputs, xin)
				res.acts.dense = append(res.acts.dense, acts)
			}
			res.FLOPs.Layers = append(res.FLOPs.Layers, DenseLayerFLOPs(blk, lengths))
			continue
		}
		li := LayerInputs{X: x, Valid: in.Valid, Noise: layerField(in.Noise, l), Jitter: layerField(in.Jitter, l)}
		if step != nil {
			out, aux, back, err := step(l, li)
			if err == nil {
				_, _, err = batchShape("stepped layer's output", out, blk.D)
			}
			if err != nil {
				return nil, fmt.Errorf("model: layer %d: %w", l, err)
			}
			res.acts.inputs = append(res.acts.inputs, x)
			res.acts.dense = append(res.acts.dense, nil)
			if res.acts.backs == nil {
				res.acts.backs = make([]LayerBack, len(c.Layers))
			}
			res.acts.backs[l] = back
			res.Aux += aux
			res.FLOPs.Layers = append(res.FLOPs.Layers, LayerFLOPs{})
			x = out
			continue
		}
		var lr *LayerResult
		var err error
		switch {
		case fz == nil:
			lr, err = layerForward(ml.Config, p.Layers[l], li, keep)
		case keep:
			lr, err = layerFrozen(ml.Config, p.Layers[l], li, fz.Layers[l], true)
		default:
			lr, err = LayerForwardFrozen(ml.Config, p.Layers[l], li, fz.Layers[l])
		}
		if keep {
			res.acts.inputs = append(res.acts.inputs, x)
			res.acts.dense = append(res.acts.dense, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("model: layer %d: %w", l, err)
		}
		res.Layers[l] = lr
		res.Frozen.Layers[l] = lr.Frozen
		res.Aux += lr.AuxLoss
		res.FLOPs.Layers = append(res.FLOPs.Layers, lr.FLOPs)
		x = lr.Out
	}
	res.Hidden = x
	n := 0
	var ce Sum // compensated: the loss of B·S tokens (docs/tolerances.md)
	for b := 0; b < rows; b++ {
		u, st := normRows(blk, p.FinalNorm, p.FinalNormBias, rawRows(x[b]), s, blk.D)
		if keep {
			res.acts.final = append(res.acts.final, st)
			res.acts.u = append(res.acts.u, u)
		}
		logits := mat.NewDense(s, c.Vocab, mulRows(u, s, p.Head))
		for i := 0; i < s; i++ {
			if i < lengths[b] && in.Targets[b][i] != IgnoreTarget {
				ce.Add(CrossEntropy(logits.RawRowView(i), in.Targets[b][i]))
				n++
			}
		}
		res.Logits = append(res.Logits, logits)
	}
	if n > 0 {
		res.CE = ce.Value() / float64(n)
	}
	res.Loss = res.CE + res.Aux
	for b := range lengths {
		res.FLOPs.Head += HeadFLOPs(blk.D, c.Vocab, lengths[b])
	}
	res.FLOPs.Total, res.FLOPs.Dense = res.FLOPs.Head, res.FLOPs.Head
	for _, lf := range res.FLOPs.Layers {
		res.FLOPs.Total += lf.Total
		res.FLOPs.Dense += lf.DenseTwin
	}
	if res.FLOPs.Dense > 0 {
		res.FLOPs.Ratio = float64(res.FLOPs.Total) / float64(res.FLOPs.Dense)
	}
	return res, nil
}

// checkTargets checks the B×S target ids (IgnoreTarget allowed).
func checkTargets(tg [][]int, rows, s, vocab int, valid []int) error {
	if len(tg) != rows {
		return fmt.Errorf("Targets: %d rows, want B = %d", len(tg), rows)
	}
	for b, row := range tg {
		if len(row) != s {
			return fmt.Errorf("Targets: row %d has length %d, want S = %d", b, len(row), s)
		}
		for i := 0; i < validLen(valid, b, s); i++ {
			if row[i] != IgnoreTarget && (row[i] < 0 || row[i] >= vocab) {
				return fmt.Errorf("Targets: row %d position %d is %d, want 0 <= id < vocab = %d or IgnoreTarget (-1)", b, i, row[i], vocab)
			}
		}
	}
	return nil
}

// RandomTokens draws a row of S+1 tokens per batch row from rng and returns
// the first S as tokens and the last S as their next-token targets.
func RandomTokens(rng *rand.Rand, rows, s, vocab int) (tokens, targets [][]int) {
	for b := 0; b < rows; b++ {
		row := make([]int, s+1)
		for i := range row {
			row[i] = rng.IntN(vocab)
		}
		tg := append([]int(nil), row[1:]...)
		tokens = append(tokens, row[:s])
		targets = append(targets, tg)
	}
	return tokens, targets
}
