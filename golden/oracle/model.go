package oracle

import (
	"fmt"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// ModelSpec is a model or decode case to generate.
type ModelSpec struct {
	Name, Description string
	Catches           []string
	Seed              uint64
	Batch, SeqLen     int
	Valid             []int
	Config            spec.ModelConfig
	// decode makes a decode case: the full causal forward against
	// token-by-token decoding, with no gradients.
	Decode bool
	// distinct keeps only draws in which every routed layer routes each row
	// through a different set of positions.
	Distinct bool
	// ties makes the case test the tie rule in the first layer, which must
	// be routed: in every row its first token left out is given the token
	// of its last token selected (makeModelTies).
	Ties bool
}

func ModelCase(s ModelSpec, seed uint64, p *ref.ModelParams, in ref.ModelInputs, res *ref.ModelResult, gaps [][]float64) (*format.Case, error) {
	cc := format.CaseConfig{Batch: s.Batch, SeqLen: s.SeqLen, ValidLengths: s.Valid, Vocab: s.Config.Vocab, MaxLen: s.Config.MaxLen}
	for _, l := range s.Config.Layers {
		cc.Layers = append(cc.Layers, spec.ModelLayer{Routed: l.Routed, Config: WrittenOut(l.Config)})
	}
	kind, loss, reference := format.KindModel, "ce + sum over routed layers of L<l>.aux.total",
		"ref.ModelForward; gradients: ref.ModelGradients (analytic, routing frozen)"
	if s.Decode {
		kind, loss, reference = format.KindDecode, "none (inference only)", "ref.ModelForward in causal-routing mode and ref.Decoder"
	}
	m := &format.Manifest{
		Format: format.Format, Version: format.Version, Name: s.Name, Kind: kind,
		Description: s.Description, Catches: s.Catches, Config: cc, Loss: loss,
		Routing: format.Routing{Margin: RoutingMargin, Gaps: gaps, Ties: s.Ties},
		Provenance: format.Provenance{
			Generator: "modref gen", GeneratorVersion: GeneratorVersion, Seed: seed, Reference: reference,
		},
	}
	b := NewBuilder(m)
	valid := s.Valid
	if valid == nil {
		valid = make([]int, s.Batch)
		for i := range valid {
			valid[i] = s.SeqLen
		}
	}
	b.Add("input.tokens", format.RoleInput, IntGrid(in.Tokens), nil)
	b.Add("input.targets", format.RoleInput, IntGrid(in.Targets), nil)
	b.Add("input.valid", format.RoleInput, IntsArray(valid), nil)
	for l := range s.Config.Layers {
		if in.Noise[l] != nil {
			b.Add(fmt.Sprintf("input.noise.L%d", l), format.RoleInput, FieldArray(in.Noise[l], nil), nil)
		}
		if in.Jitter[l] != nil {
			b.Add(fmt.Sprintf("input.jitter.L%d", l), format.RoleInput, FieldArray(in.Jitter[l], nil), nil)
		}
	}
	params := p.Tensors()
	for _, t := range params {
		b.Add("param."+t.Name, format.RoleParam, TensorArray(t), nil)
	}
	b.Expect("expected.logits", BatchArray(res.Logits))
	for l, lr := range res.Layers {
		if lr == nil {
			continue
		}
		pre := fmt.Sprintf("expected.L%d.", l)
		b.Expect(pre+"router_logits", FieldArray(lr.RouterWeights, s.Valid))
		b.Expect(pre+"selected", SelectedArray(lr.Selection))
		if s.Config.Layers[l].Config.HasPredictor() {
			b.Expect(pre+"predictor_logits", FieldArray(lr.PredictorLogits, s.Valid))
		}
		if !s.Decode {
			ExpectLayerStages(b, pre, lr, s.Valid)
			b.Expect(pre+"aux.total", format.Scalar(lr.AuxLoss))
		}
	}
	if s.Decode {
		if err := addDecode(b, s, p, in); err != nil {
			return nil, err
		}
		return b.Build(), nil
	}
	b.Expect("expected.ce", format.Scalar(res.CE))
	b.Expect("expected.loss", format.Scalar(res.Loss))
	_, g, err := ref.ModelGradients(s.Config, p, in, res.Frozen)
	if err != nil {
		return nil, err
	}
	for k, t := range g.Tensors() {
		b.Expect("grad.param."+params[k].Name, format.Float(t.Data, t.Shape...))
	}
	return b.Build(), nil
}

// LayerStageArrays are the arrays of a routed layer of a model case that a
// candidate may leave out (judge.Optional): its weights g, multipliers,
// auxiliary targets t and output, the residual stream it hands the next
// layer. With them the stage report of a model case reads a layer's
// stages (docs/golden-format.md, "Arrays"): "layer 1, output weights"
// where the logits alone could only say "output".
var LayerStageArrays = []string{"weights", "multipliers", "targets", "out"}

// ExpectLayerStages adds a model case's per-layer arrays LayerStageArrays
// of the routed layer lr, named with prefix pre ("expected.L<l>.").
func ExpectLayerStages(b *Builder, pre string, lr *ref.LayerResult, valid []int) {
	b.Expect(pre+"weights", FieldArray(lr.Weights, valid))
	b.Expect(pre+"multipliers", FieldArray(lr.Multipliers, valid))
	b.Expect(pre+"targets", FieldArray(lr.Targets, valid))
	b.Expect(pre+"out", BatchArray(lr.Out))
}

// addDecode decodes each row's valid tokens one by one with ref.Decoder and
// adds the logits and per-layer routing decisions it produced, 0 at padded
// positions.
func addDecode(b *Builder, s ModelSpec, p *ref.ModelParams, in ref.ModelInputs) error {
	vocab := s.Config.Vocab
	logits := make([]float64, 0, s.Batch*s.SeqLen*vocab)
	routed := make([][][]int, len(s.Config.Layers))
	for l := range routed {
		routed[l] = make([][]int, s.Batch)
	}
	for row := 0; row < s.Batch; row++ {
		dec, err := ref.NewDecoder(s.Config, p)
		if err != nil {
			return err
		}
		for i := 0; i < ValidLen(s.Valid, row, s.SeqLen); i++ {
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
		for range s.SeqLen - ValidLen(s.Valid, row, s.SeqLen) {
			logits = append(logits, make([]float64, vocab)...)
			for l := range routed {
				routed[l][row] = append(routed[l][row], 0)
			}
		}
	}
	b.Expect("expected.decode_logits", format.Float(logits, s.Batch, s.SeqLen, vocab))
	for l, ml := range s.Config.Layers {
		if ml.Routed {
			b.Expect(fmt.Sprintf("expected.L%d.routed", l), IntGrid(routed[l]))
		}
	}
	return nil
}
