package ref

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// PatternKind names a layer pattern of docs/spec.md §10.
type PatternKind string

// Layer patterns (docs/spec.md §10).
const (
	// PatternAll routes every layer.
	PatternAll PatternKind = "all"
	// PatternEveryOther routes layers 0, 2, 4, ... (the blog seed's choice).
	PatternEveryOther PatternKind = "every_other"
	// PatternEveryNth routes layer l iff l >= Offset and (l - Offset) % Every == 0.
	PatternEveryNth PatternKind = "every_nth"
	// PatternDenseEnds keeps the first DenseStart and the last DenseEnd layers
	// dense and routes every layer between them.
	PatternDenseEnds PatternKind = "dense_ends"
	// PatternList routes exactly the layers listed.
	PatternList PatternKind = "list"
)

// Pattern says which layers of a model are routed (docs/spec.md §10).
type Pattern struct {
	Kind       PatternKind
	Every      int   // every_nth: n >= 1
	Offset     int   // every_nth: first routed layer, 0 <= Offset < L
	DenseStart int   // dense_ends: dense layers at the start (5 in the GPT codebase seed)
	DenseEnd   int   // dense_ends: dense layers at the end (1 in the GPT codebase seed)
	Layers     []int // list: routed layer indices, each in [0, L), no repeats
}

// Routed is docs/spec.md §10: for each of the nLayers layers, whether it is
// routed.
func (p Pattern) Routed(nLayers int) ([]bool, error) {
	if nLayers < 1 {
		return nil, fmt.Errorf("pattern: %d layers, want >= 1", nLayers)
	}
	routed := make([]bool, nLayers)
	switch p.Kind {
	case PatternAll:
		for l := range routed {
			routed[l] = true
		}
	case PatternEveryOther:
		for l := 0; l < nLayers; l += 2 {
			routed[l] = true
		}
	case PatternEveryNth:
		if p.Every < 1 || p.Offset < 0 || p.Offset >= nLayers {
			return nil, fmt.Errorf("pattern every_nth: Every = %d, Offset = %d with %d layers, want Every >= 1 and 0 <= Offset < %d", p.Every, p.Offset, nLayers, nLayers)
		}
		for l := p.Offset; l < nLayers; l += p.Every {
			routed[l] = true
		}
	case PatternDenseEnds:
		if p.DenseStart < 0 || p.DenseEnd < 0 || p.DenseStart+p.DenseEnd > nLayers {
			return nil, fmt.Errorf("pattern dense_ends: DenseStart = %d, DenseEnd = %d with %d layers, want both >= 0 and DenseStart + DenseEnd <= %d", p.DenseStart, p.DenseEnd, nLayers, nLayers)
		}
		for l := p.DenseStart; l < nLayers-p.DenseEnd; l++ {
			routed[l] = true
		}
	case PatternList:
		for _, l := range p.Layers {
			if l < 0 || l >= nLayers {
				return nil, fmt.Errorf("pattern list: layer %d, want 0 <= l < %d", l, nLayers)
			}
			if routed[l] {
				return nil, fmt.Errorf("pattern list: layer %d listed twice", l)
			}
			routed[l] = true
		}
	default:
		return nil, fmt.Errorf("pattern: Kind = %q, want all, every_other, every_nth, dense_ends or list", p.Kind)
	}
	return routed, nil
}

// ModelLayer is one layer of a model: a dense block, or a routed layer.
// Config.Block is the block shape in both cases; the routing fields are
// read only when Routed.
type ModelLayer struct {
	Routed bool
	Config Config
}

// ModelConfig is a small MoD language model (docs/spec.md §10):
// embedding, the layers, a final norm and an LM head.
type ModelConfig struct {
	Vocab  int
	Layers []ModelLayer
	// MaxLen is the number of learned position embeddings (Block.Positions =
	// learned); sequences may not be longer. Unused with RoPE.
	MaxLen int
}

// NewModelConfig builds nLayers layers that share routing's block shape and
// routing choices, routed where pattern says. maxLen is the number of learned
// position embeddings (0 with RoPE). capacities, when non-nil, is the
// per-layer capacity list of docs/spec.md §3: one entry per routed layer,
// in layer order.
func NewModelConfig(vocab, maxLen, nLayers int, routing Config, pattern Pattern, capacities []Capacity) (ModelConfig, error) {
	routed, err := pattern.Routed(nLayers)
	if err != nil {
		return ModelConfig{}, err
	}
	nRouted := 0
	for _, r := range routed {
		if r {
			nRouted++
		}
	}
	if capacities != nil && len(capacities) != nRouted {
		return ModelConfig{}, fmt.Errorf("model: %d per-layer capacities for %d routed layers, want one per routed layer", len(capacities), nRouted)
	}
	cfg := ModelConfig{Vocab: vocab, MaxLen: maxLen}
	j := 0
	for l := 0; l < nLayers; l++ {
		c := routing
		if routed[l] && capacities != nil {
			c.Capacity = capacities[j]
			j++
		}
		cfg.Layers = append(cfg.Layers, ModelLayer{Routed: routed[l], Config: c})
	}
	return cfg, cfg.Validate()
}

// Validate reports the first invalid field of the model configuration.
func (c ModelConfig) Validate() error {
	if c.Vocab < 2 {
		return fmt.Errorf("model: Vocab = %d, want >= 2", c.Vocab)
	}
	if len(c.Layers) == 0 {
		return fmt.Errorf("model: no layers, want >= 1")
	}
	if c.Layers[0].Config.Block.Positions == PositionLearned && c.MaxLen < 1 {
		return fmt.Errorf("model: MaxLen = %d with learned position embeddings, want the longest sequence length (>= 1)", c.MaxLen)
	}
	for l, ml := range c.Layers {
		if ml.Config.Block != c.Layers[0].Config.Block {
			return fmt.Errorf("model: layer %d block %+v differs from layer 0's %+v; layers share d and the norm", l, ml.Config.Block, c.Layers[0].Config.Block)
		}
		var err error
		if ml.Routed {
			err = ml.Config.Validate()
		} else {
			err = ml.Config.Block.Validate()
		}
		if err != nil {
			return fmt.Errorf("model: layer %d: %w", l, err)
		}
	}
	return nil
}

// Block is the block shape shared by the model's layers.
func (c ModelConfig) Block() BlockConfig {
	return c.Layers[0].Config.Block
}

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
func NewModelParams(c ModelConfig, seed uint64) *ModelParams {
	rng := NewRand(seed)
	blk := c.Block()
	p := &ModelParams{Embed: RandomMatrix(rng, c.Vocab, blk.D, 1)}
	if blk.Positions == PositionLearned {
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
	if blk.Norm == NormLayer {
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
func (p *ModelParams) Check(c ModelConfig) error {
	blk := c.Block()
	if err := checkMat("Embed", p.Embed, c.Vocab, blk.D, true); err != nil {
		return err
	}
	if err := checkMat("PosEmbed", p.PosEmbed, c.MaxLen, blk.D, blk.Positions == PositionLearned); err != nil {
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
	if err := checkVec("FinalNormBias", p.FinalNormBias, blk.D, blk.Norm == NormLayer); err != nil {
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
}

// DenseLayerForward is a dense (non-routed) layer: out_i = x_i + f_i(X) over
// the V_b valid tokens of each row (docs/spec.md §5 with every token
// selected and weight 1); padded positions keep x.
func DenseLayerForward(c BlockConfig, p *BlockParams, x []*mat.Dense, valid []int) ([]*mat.Dense, error) {
	rows, s, err := batchShape("dense layer input", x, c.D)
	if err != nil {
		return nil, err
	}
	if err := checkValid(valid, rows, s); err != nil {
		return nil, err
	}
	out := make([]*mat.Dense, rows)
	for b, xb := range x {
		out[b] = mat.DenseCopyOf(xb)
		v := validLen(valid, b, s)
		if v == 0 {
			continue
		}
		f, err := BlockUpdate(c, p, gatherRows(xb, iota(v)), iota(v))
		if err != nil {
			return nil, fmt.Errorf("dense layer row %d: %w", b, err)
		}
		for i := 0; i < v; i++ {
			for j := 0; j < c.D; j++ {
				out[b].Set(i, j, xb.At(i, j)+f.At(i, j))
			}
		}
	}
	return out, nil
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
func HeadLogits(c BlockConfig, p *ModelParams, x []float64) []float64 {
	return vecMat(normalize(c, p.FinalNorm, p.FinalNormBias, x), p.Head)
}

// ModelForward is the whole language model (docs/spec.md §10): embedding,
// each layer (dense, or routed with its own decision), final norm, head,
// cross-entropy, and the routed layers' auxiliary losses.
func ModelForward(c ModelConfig, p *ModelParams, in ModelInputs) (*ModelResult, error) {
	return modelForward(c, p, in, nil)
}

// ModelForwardFrozen is ModelForward with every routed layer's decision and
// stop-gradient constants taken from fz (from an earlier result's Frozen):
// the function to differentiate with finite differences.
func ModelForwardFrozen(c ModelConfig, p *ModelParams, in ModelInputs, fz ModelFrozen) (*ModelResult, error) {
	if len(fz.Layers) != len(c.Layers) {
		return nil, fmt.Errorf("model: frozen decisions for %d layers, want %d", len(fz.Layers), len(c.Layers))
	}
	return modelForward(c, p, in, &fz)
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

func modelForward(c ModelConfig, p *ModelParams, in ModelInputs, fz *ModelFrozen) (*ModelResult, error) {
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
	if blk := c.Block(); blk.Positions == PositionLearned && s > c.MaxLen {
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
			var err error
			x, err = DenseLayerForward(blk, &p.Layers[l].Block, x, in.Valid)
			if err != nil {
				return nil, fmt.Errorf("model: layer %d: %w", l, err)
			}
			res.FLOPs.Layers = append(res.FLOPs.Layers, DenseLayerFLOPs(blk, lengths))
			continue
		}
		li := LayerInputs{X: x, Valid: in.Valid, Noise: layerField(in.Noise, l), Jitter: layerField(in.Jitter, l)}
		var lr *LayerResult
		var err error
		if fz == nil {
			lr, err = LayerForward(ml.Config, p.Layers[l], li)
		} else {
			lr, err = LayerForwardFrozen(ml.Config, p.Layers[l], li, fz.Layers[l])
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
	for b := 0; b < rows; b++ {
		logits := mat.NewDense(s, c.Vocab, nil)
		for i := 0; i < s; i++ {
			logits.SetRow(i, HeadLogits(blk, p, x[b].RawRowView(i)))
			if i < lengths[b] && in.Targets[b][i] != IgnoreTarget {
				res.CE += CrossEntropy(logits.RawRowView(i), in.Targets[b][i])
				n++
			}
		}
		res.Logits = append(res.Logits, logits)
	}
	if n > 0 {
		res.CE /= float64(n)
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
