package ref

import (
	"fmt"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// ModelGradients is the analytic backward pass of ModelForwardFrozen: it
// returns the model's result and dL/dθ of its loss L = CE + Aux for every
// parameter θ, each in its parameter's field and shape (so that Tensors
// lists them in the order of ModelParams.Tensors), with every routed
// layer's decision and stop-gradient constants of fz held fixed
// (TestModelGradientsAreTheFiniteDifferences holds it to the central
// differences).
func ModelGradients(c spec.ModelConfig, p *ModelParams, in ModelInputs, fz ModelFrozen) (*ModelResult, *ModelParams, error) {
	if len(fz.Layers) != len(c.Layers) {
		return nil, nil, fmt.Errorf("model: frozen decisions for %d layers, want %d", len(fz.Layers), len(c.Layers))
	}
	res, err := modelForward(c, p, in, &fz, nil, true)
	if err != nil {
		return nil, nil, err
	}
	g, err := modelBackward(c, signed, p, in, res)
	return res, g, err
}

// ModelForwardGradients is ModelForward and then ModelGradients at the
// decisions it made (res.Frozen), with one forward pass instead of two:
// the same result and the same gradients.
func ModelForwardGradients(c spec.ModelConfig, p *ModelParams, in ModelInputs) (*ModelResult, *ModelParams, error) {
	res, err := modelForward(c, p, in, nil, nil, true)
	if err != nil {
		return nil, nil, err
	}
	g, err := modelBackward(c, signed, p, in, res)
	return res, g, err
}

// LayerBack is the backward pass of one evaluation of a routed layer: given
// dL/dout (B matrices S×d), it returns dL/dX and dL/dθ of the layer's
// parameters, its auxiliary loss's gradient included (as LayerGrads).
type LayerBack func(dout []*mat.Dense) (*LayerGrads, error)

// LayerStep evaluates routed layer l of a model on its inputs in place of
// LayerForwardFrozen, for ModelGradientsThrough: it returns the layer's
// output (B matrices S×d), its auxiliary loss and its backward pass.
type LayerStep func(l int, in LayerInputs) (out []*mat.Dense, aux float64, back LayerBack, err error)

// ModelGradientsThrough is ModelGradients with every routed layer
// evaluated, forward and backward, by step: the embedding, the dense
// layers, the final norm, the head and the cross-entropy are the model's,
// so a caller can differentiate a model whose routed layers it computes
// itself. The result has Logits, Hidden, CE, Aux and Loss; its Layers,
// Frozen and the routed layers' FLOPs are empty.
func ModelGradientsThrough(c spec.ModelConfig, p *ModelParams, in ModelInputs, step LayerStep) (*ModelResult, *ModelParams, error) {
	res, back, err := ModelForwardThrough(c, p, in, step)
	if err != nil {
		return nil, nil, err
	}
	g, err := back()
	return res, g, err
}

// ModelForwardThrough is ModelGradientsThrough in two halves: its forward
// (the same result), and back, which returns the same gradients when
// called, at most once, after the result's fields are read and before any
// is written. A caller that may not need the gradients (one judging the
// forward first) skips their cost.
func ModelForwardThrough(c spec.ModelConfig, p *ModelParams, in ModelInputs, step LayerStep) (res *ModelResult, back func() (*ModelParams, error), err error) {
	res, err = modelForward(c, p, in, nil, step, true)
	if err != nil {
		return nil, nil, err
	}
	return res, func() (*ModelParams, error) { return modelBackward(c, signed, p, in, res) }, nil
}

// modelBackward is ModelGradients' backward pass over the kept forward res.
func modelBackward(c spec.ModelConfig, a arith, p *ModelParams, in ModelInputs, res *ModelResult) (*ModelParams, error) {
	blk := c.Block()
	d := blk.D
	g := &ModelParams{Embed: zeroMat(p.Embed), PosEmbed: zeroMat(p.PosEmbed),
		FinalNorm: zeroVec(p.FinalNorm), FinalNormBias: zeroVec(p.FinalNormBias), Head: zeroMat(p.Head)}
	rows, s := len(in.Tokens), len(in.Tokens[0])

	// CE = mean over the N valid positions with a target of
	// logsumexp(z) − z_target: dz = (softmax(z) − onehot)/N.
	n := 0
	for b := 0; b < rows; b++ {
		for i := 0; i < validLen(in.Valid, b, s); i++ {
			if in.Targets[b][i] != IgnoreTarget {
				n++
			}
		}
	}
	dx := make([]*mat.Dense, rows) // dL/d hidden, B×S×d
	for b := 0; b < rows; b++ {
		dz := make([]float64, s*c.Vocab) // S×vocab
		for i := 0; i < validLen(in.Valid, b, s); i++ {
			tg := in.Targets[b][i]
			if tg == IgnoreTarget {
				continue
			}
			row := dz[i*c.Vocab : (i+1)*c.Vocab]
			copy(row, res.Logits[b].RawRowView(i))
			softmaxInPlace(row)
			a.inPlace(row)
			row[tg] = a.sub(row[tg], 1)
			for j := range row {
				row[j] /= a.f(float64(n))
			}
		}
		// logits = u·Head, u = N(hidden)
		a.addXtY(g.Head, res.acts.u[b], dz, s)
		du := mulWt(dz, s, a.dense(p.Head), nil)
		dx[b] = mat.NewDense(s, d, normBackward(blk, a, g.FinalNorm, g.FinalNormBias, p.FinalNorm, rawRows(res.Hidden[b]), res.acts.final[b], du, s, d))
	}

	for l := len(c.Layers) - 1; l >= 0; l-- {
		ml := c.Layers[l]
		xin := res.acts.inputs[l]
		if !ml.Routed {
			gl := zeroBlockLike(&p.Layers[l].Block)
			w := a.weights(&p.Layers[l].Block)
			for b := 0; b < rows; b++ {
				ac := res.acts.dense[l][b]
				if ac == nil {
					continue
				}
				// out = x + f over the v valid rows, x elsewhere.
				v := ac.n
				df := rawRows(dx[b].Slice(0, v, 0, d).(*mat.Dense))
				dxf := blockBackward(blk, a, w, &gl, ac, df)
				for i := 0; i < v; i++ {
					row := dx[b].RawRowView(i)
					for j := range row {
						row[j] += dxf[i*d+j]
					}
				}
			}
			g.Layers = append(g.Layers, &LayerParams{Block: gl})
			continue
		}
		if res.acts.backs != nil {
			if a == squares {
				return nil, fmt.Errorf("model: layer %d: a stepped layer has no pass in the squares arithmetic", l)
			}
			lg, err := res.acts.backs[l](dx)
			if err != nil {
				return nil, fmt.Errorf("model: layer %d: %w", l, err)
			}
			dx = lg.X
			g.Layers = append(g.Layers, lg.Params)
			continue
		}
		li := LayerInputs{X: xin, Valid: in.Valid, Noise: layerField(in.Noise, l), Jitter: layerField(in.Jitter, l)}
		lg := layerBackward(ml.Config, a, p.Layers[l], li, res.Layers[l], upstreamParts(a, res.Layers[l], dx))
		dx = lg.X
		g.Layers = append(g.Layers, lg.Params)
	}
	for i, j := 0, len(g.Layers)-1; i < j; i, j = i+1, j-1 {
		g.Layers[i], g.Layers[j] = g.Layers[j], g.Layers[i]
	}

	// x_i = Embed[token_i] (+ PosEmbed[i]) at valid positions.
	for b := 0; b < rows; b++ {
		for i := 0; i < validLen(in.Valid, b, s); i++ {
			dxi := dx[b].RawRowView(i)
			e := g.Embed.RawRowView(in.Tokens[b][i])
			for j, v := range dxi {
				e[j] += v
			}
			if g.PosEmbed != nil {
				pe := g.PosEmbed.RawRowView(i)
				for j, v := range dxi {
					pe[j] += v
				}
			}
		}
	}
	return g, nil
}
