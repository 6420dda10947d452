package ref

import (
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// TestModelGradientsAreTheFiniteDifferences checks ModelGradients, every
// parameter's gradient, against central differences of the loss
// CE + Aux of ModelForwardFrozen with ModelForward's decisions frozen, on
// drawn models: 1 to 3 layers, routed by drawLayerConfig's routing every
// layer, every other layer or none, with padding and ignored targets.
// ModelForwardGradients must give ModelGradients' bits, and so must
// ModelGradientsThrough with each routed layer stepped by LayerForwardKept
// and LayerBackward.
func TestModelGradientsAreTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		routing := drawLayerConfig(t)
		layers := rapid.IntRange(1, 3).Draw(t, "layers")
		pattern := spec.Pattern{Kind: rapid.SampledFrom([]spec.PatternKind{spec.PatternAll, spec.PatternEveryOther, spec.PatternList}).Draw(t, "pattern")}
		if pattern.Kind == spec.PatternList {
			pattern.Layers = []int{}
		}
		vocab := rapid.IntRange(2, 9).Draw(t, "vocab")
		s := rapid.IntRange(1, 8).Draw(t, "S")
		maxLen := 0
		if routing.Block.Positions == spec.PositionLearned {
			maxLen = s + rapid.IntRange(0, 2).Draw(t, "extra")
		}
		c, err := spec.NewModelConfig(vocab, maxLen, layers, routing, pattern, nil)
		if err != nil {
			t.Fatalf("drawn model: %v", err)
		}
		p := NewModelParams(c, rapid.Uint64().Draw(t, "seed"))
		rng := NewRand(rapid.Uint64().Draw(t, "tseed"))
		rows := rapid.IntRange(1, 3).Draw(t, "B")
		var in ModelInputs
		in.Tokens, in.Targets = RandomTokens(rng, rows, s, vocab)
		if rapid.Bool().Draw(t, "padded") {
			for range rows {
				in.Valid = append(in.Valid, rapid.IntRange(0, s).Draw(t, "valid"))
			}
		}
		if rapid.Bool().Draw(t, "ignore") {
			in.Targets[0][rapid.IntRange(0, s-1).Draw(t, "ignored")] = IgnoreTarget
		}
		for _, ml := range c.Layers {
			var noise, jitter [][]float64
			if ml.Routed && ml.Config.Router == spec.RouterRandom {
				noise = RandomField(rng, rows, s)
			}
			if ml.Routed && ml.Config.Jitter > 0 {
				jitter = RandomField(rng, rows, s)
			}
			in.Noise = append(in.Noise, noise)
			in.Jitter = append(in.Jitter, jitter)
		}
		res, err := ModelForward(c, p, in)
		if err != nil {
			t.Fatal(err)
		}
		fz := res.Frozen
		loss := func() (float64, error) {
			r, err := ModelForwardFrozen(c, p, in, fz)
			if err != nil {
				return 0, err
			}
			return r.Loss, nil
		}
		_, g, err := ModelGradients(c, p, in, fz)
		if err != nil {
			t.Fatal(err)
		}
		_, g1, err := ModelForwardGradients(c, p, in)
		if err != nil {
			t.Fatal(err)
		}
		sameTensorBits(t, "ModelForwardGradients", g1.Tensors(), g.Tensors())
		// The routed layers stepped by the caller as ref steps them.
		step := func(l int, li LayerInputs) ([]*mat.Dense, float64, LayerBack, error) {
			lr, err := LayerForwardKept(c.Layers[l].Config, p.Layers[l], li, fz.Layers[l])
			if err != nil {
				return nil, 0, nil, err
			}
			back := func(dout []*mat.Dense) (*LayerGrads, error) {
				return LayerBackward(c.Layers[l].Config, p.Layers[l], li, lr, upstreamParts(signed, lr, dout))
			}
			return lr.Out, lr.AuxLoss, back, nil
		}
		r2, g2, err := ModelGradientsThrough(c, p, in, step)
		if err != nil {
			t.Fatal(err)
		}
		if r2.Loss != res.Loss {
			t.Fatalf("ModelGradientsThrough: loss %v, ModelForward's %v", r2.Loss, res.Loss)
		}
		sameTensorBits(t, "ModelGradientsThrough", g2.Tensors(), g.Tensors())
		gts, pts := g.Tensors(), p.Tensors()
		if len(gts) != len(pts) {
			t.Fatalf("%d gradient tensors for %d parameters", len(gts), len(pts))
		}
		for k, pt := range pts {
			e.compare(t, pt.Name, gts[k].Data, loss, pt.Data)
		}
	})
	e.report(t)
}
