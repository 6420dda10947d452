package golden

import (
	"fmt"
	"slices"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// modelSpec is a model or decode case to generate.
type modelSpec struct {
	name, description string
	catches           []string
	seed              uint64
	batch, seqLen     int
	valid             []int
	cfg               spec.ModelConfig
	// decode makes a decode case: the full causal forward against
	// token-by-token decoding, with no gradients.
	decode bool
	// distinct keeps only draws in which every routed layer routes each row
	// through a different set of positions.
	distinct bool
	// ties makes the case test the tie rule in the first layer, which must
	// be routed: in every row its first token left out is given the token
	// of its last token selected (makeModelTies).
	ties bool
}

func drawModel(s modelSpec, seed uint64) (*ref.ModelParams, ref.ModelInputs) {
	p := ref.NewModelParams(s.cfg, seed)
	rng := ref.NewRand(seed ^ 0x5eed)
	tokens, targets := ref.RandomTokens(rng, s.batch, s.seqLen, s.cfg.Vocab)
	in := ref.ModelInputs{Tokens: tokens, Targets: targets, Valid: s.valid}
	for b := range targets {
		for i := validLen(s.valid, b, s.seqLen); i < s.seqLen; i++ {
			tokens[b][i], targets[b][i] = 0, ref.IgnoreTarget
		}
	}
	for _, l := range s.cfg.Layers {
		var noise, jitter [][]float64
		if l.Routed && l.Config.Router == spec.RouterRandom {
			noise = ref.RandomField(rng, s.batch, s.seqLen)
		}
		if l.Routed && l.Config.Jitter > 0 {
			jitter = ref.RandomField(rng, s.batch, s.seqLen)
		}
		in.Noise = append(in.Noise, noise)
		in.Jitter = append(in.Jitter, jitter)
	}
	return p, in
}

// genModel generates a model or decode case, redrawing until every routing
// decision of every routed layer is at least minCaseGap from a flip.
func genModel(s modelSpec) (*format.Case, error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, errorf(s.name, err)
	}
	for attempt := uint64(0); attempt < 100; attempt++ {
		seed := s.seed + attempt
		p, in := drawModel(s, seed)
		if s.ties {
			if err := makeModelTies(s, p, in); err != nil {
				return nil, errorf(s.name, err)
			}
		}
		res, err := ref.ModelForward(s.cfg, p, in)
		if err != nil {
			return nil, errorf(s.name, err)
		}
		var gaps [][]float64
		smallest := 1.0
		for l, lr := range res.Layers {
			if lr == nil {
				continue
			}
			g := layerGaps(s.cfg.Layers[l].Config, lr, s.valid)
			gaps = append(gaps, g)
			if !s.ties || l > 0 {
				smallest = min(smallest, minGap(g))
			}
		}
		if s.ties && slices.ContainsFunc(gaps[0], func(g float64) bool { return g != 0 }) {
			return nil, errorf(s.name, fmt.Errorf("the first layer's router weights do not tie in every row: gaps %v", gaps[0]))
		}
		if smallest < minCaseGap || s.distinct && !rowsDiffer(res) {
			continue
		}
		c, err := modelCase(s, seed, p, in, res, gaps)
		if err != nil {
			return nil, errorf(s.name, err)
		}
		return c, nil
	}
	return nil, errorf(s.name, fmt.Errorf("no draw in 100 keeps every routing gap above %v", minCaseGap))
}

// makeModelTies copies, in every row, the token at the first layer's last
// selected position onto its first position left out. With rotary
// positions the first layer's input is the token's embedding alone, so
// the two router weights are then exactly equal: a tie at the k-th weight,
// which the lower position wins.
func makeModelTies(s modelSpec, p *ref.ModelParams, in ref.ModelInputs) error {
	if !s.cfg.Layers[0].Routed || s.cfg.Block().Positions != spec.PositionRoPE || s.cfg.Layers[0].Config.Router != spec.RouterLinear {
		return fmt.Errorf("a model ties case needs a first layer routed by a linear router, with rotary positions")
	}
	res, err := ref.ModelForward(s.cfg, p, in)
	if err != nil {
		return err
	}
	lr := res.Layers[0]
	for b, row := range lr.RouterWeights {
		last, first, err := tieBoundary(row, lr.Selection.Rows[b], validLen(s.valid, b, s.seqLen))
		if err != nil {
			return fmt.Errorf("row %d: %w", b, err)
		}
		in.Tokens[b][first] = in.Tokens[b][last]
	}
	return nil
}

// rowsDiffer reports whether every routed layer of res routes each row
// through a different set of positions.
func rowsDiffer(res *ref.ModelResult) bool {
	for _, lr := range res.Layers {
		if lr == nil {
			continue
		}
		rows := lr.Selection.Rows
		for a := range rows {
			for b := a + 1; b < len(rows); b++ {
				if slices.Equal(rows[a], rows[b]) {
					return false
				}
			}
		}
	}
	return true
}

func modelCase(s modelSpec, seed uint64, p *ref.ModelParams, in ref.ModelInputs, res *ref.ModelResult, gaps [][]float64) (*format.Case, error) {
	cc := format.CaseConfig{Batch: s.batch, SeqLen: s.seqLen, ValidLengths: s.valid, Vocab: s.cfg.Vocab, MaxLen: s.cfg.MaxLen}
	for _, l := range s.cfg.Layers {
		cc.Layers = append(cc.Layers, spec.ModelLayer{Routed: l.Routed, Config: writtenOut(l.Config)})
	}
	kind, loss, reference := format.KindModel, "ce + sum over routed layers of L<l>.aux.total",
		"ref.ModelForward; gradients: ref.ModelGradients (analytic, routing frozen)"
	catches := withComputedCatches(s.catches, routedConfigs(s.cfg), hasPadding(s.valid, s.seqLen))
	if shared, _ := findLayerDeviation("shared_router"); skipModel(s.cfg, shared) == "" && !slices.Contains(catches, shared.name) {
		// Two or more routed layers, each with a router of its own.
		catches = append(catches, shared.name)
	}
	if s.decode {
		kind, loss, reference = format.KindDecode, "none (inference only)", "ref.ModelForward in causal-routing mode and ref.Decoder"
		catches = s.catches // a decode case tests the decoding, not the forward
	}
	m := &format.Manifest{
		Format: format.Format, Version: format.Version, Name: s.name, Kind: kind,
		Description: s.description, Catches: catches, Config: cc, Loss: loss,
		Routing: format.Routing{Margin: RoutingMargin, Gaps: gaps, Ties: s.ties},
		Provenance: format.Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed, Reference: reference,
		},
	}
	b := newBuilder(m)
	valid := s.valid
	if valid == nil {
		valid = make([]int, s.batch)
		for i := range valid {
			valid[i] = s.seqLen
		}
	}
	b.add("input.tokens", format.RoleInput, intGrid(in.Tokens), nil)
	b.add("input.targets", format.RoleInput, intGrid(in.Targets), nil)
	b.add("input.valid", format.RoleInput, intsArray(valid), nil)
	for l := range s.cfg.Layers {
		if in.Noise[l] != nil {
			b.add(fmt.Sprintf("input.noise.L%d", l), format.RoleInput, fieldArray(in.Noise[l], nil), nil)
		}
		if in.Jitter[l] != nil {
			b.add(fmt.Sprintf("input.jitter.L%d", l), format.RoleInput, fieldArray(in.Jitter[l], nil), nil)
		}
	}
	params := p.Tensors()
	for _, t := range params {
		b.add("param."+t.Name, format.RoleParam, tensorArray(t), nil)
	}
	b.expect("expected.logits", batchArray(res.Logits))
	for l, lr := range res.Layers {
		if lr == nil {
			continue
		}
		pre := fmt.Sprintf("expected.L%d.", l)
		b.expect(pre+"router_logits", fieldArray(lr.RouterWeights, s.valid))
		b.expect(pre+"selected", selectedArray(lr.Selection))
		if s.cfg.Layers[l].Config.HasPredictor() {
			b.expect(pre+"predictor_logits", fieldArray(lr.PredictorLogits, s.valid))
		}
		if !s.decode {
			b.expect(pre+"aux.total", format.Scalar(lr.AuxLoss))
		}
	}
	if s.decode {
		if err := addDecode(b, s, p, in); err != nil {
			return nil, err
		}
		return b.build(), nil
	}
	b.expect("expected.ce", format.Scalar(res.CE))
	b.expect("expected.loss", format.Scalar(res.Loss))
	_, g, err := ref.ModelGradients(s.cfg, p, in, res.Frozen)
	if err != nil {
		return nil, err
	}
	for k, t := range g.Tensors() {
		b.expect("grad.param."+params[k].Name, format.Float(t.Data, t.Shape...))
	}
	return b.build(), nil
}

// addDecode decodes each row's valid tokens one by one with ref.Decoder and
// adds the logits and per-layer routing decisions it produced, 0 at padded
// positions.
func addDecode(b *builder, s modelSpec, p *ref.ModelParams, in ref.ModelInputs) error {
	vocab := s.cfg.Vocab
	logits := make([]float64, 0, s.batch*s.seqLen*vocab)
	routed := make([][][]int, len(s.cfg.Layers))
	for l := range routed {
		routed[l] = make([][]int, s.batch)
	}
	for row := 0; row < s.batch; row++ {
		dec, err := ref.NewDecoder(s.cfg, p)
		if err != nil {
			return err
		}
		for i := 0; i < validLen(s.valid, row, s.seqLen); i++ {
			st, err := dec.Step(in.Tokens[row][i])
			if err != nil {
				return err
			}
			logits = append(logits, st.Logits...)
			for l, r := range st.Routed {
				v := 0
				if r {
					v = 1
				}
				routed[l][row] = append(routed[l][row], v)
			}
		}
		for range s.seqLen - validLen(s.valid, row, s.seqLen) {
			logits = append(logits, make([]float64, vocab)...)
			for l := range routed {
				routed[l][row] = append(routed[l][row], 0)
			}
		}
	}
	b.expect("expected.decode_logits", format.Float(logits, s.batch, s.seqLen, vocab))
	for l, ml := range s.cfg.Layers {
		if ml.Routed {
			b.expect(fmt.Sprintf("expected.L%d.routed", l), intGrid(routed[l]))
		}
	}
	return nil
}
