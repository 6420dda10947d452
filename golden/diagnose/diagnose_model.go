package diagnose

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// modelSpecOf is the generator's description of a model or decode case.
func modelSpecOf(c *format.Case) oracle.ModelSpec {
	m := c.Manifest
	cfg := m.Config
	return oracle.ModelSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: cfg.ModelConfig(), Decode: m.Kind == format.KindDecode}
}

// modelRun is one evaluation of a model with every routed layer under a
// deviation.
type modelRun struct {
	logits []*mat.Dense
	layers []*layerRun // nil for dense layers
	ce     float64
	loss   float64
}

// runModel is ref.ModelForward with each routed layer evaluated by d.run:
// embedding, the layers, final norm, head, mean cross-entropy over the valid
// positions with a target, plus the routed layers' auxiliary losses. The
// inputs must have passed ref.ModelForward.
func (d *layerDeviation) runModel(cfg spec.ModelConfig, p *ref.ModelParams, in ref.ModelInputs, st []layerState) (*modelRun, error) {
	blk := cfg.Block()
	mr := &modelRun{layers: make([]*layerRun, len(cfg.Layers))}
	var shared *ref.LayerParams // the first routed layer's, under sharedRouter
	x := ref.Embed(p, in.Tokens, in.Valid)
	aux := 0.0
	for l, ml := range cfg.Layers {
		if !ml.Routed {
			var err error
			if x, err = ref.DenseLayerForward(blk, &p.Layers[l].Block, x, in.Valid); err != nil {
				return nil, fmt.Errorf("layer %d: %w", l, err)
			}
			continue
		}
		li := ref.LayerInputs{X: x, Valid: in.Valid, Noise: layerInput(in.Noise, l), Jitter: layerInput(in.Jitter, l)}
		lp := p.Layers[l]
		if d.sharedRouter {
			if shared == nil {
				shared = lp
			} else {
				if st[l].sharedParams == nil {
					// The same backing arrays: a perturbation of the
					// first layer's router moves every layer's.
					own := *lp
					own.Router, own.RouterBias = shared.Router, shared.RouterBias
					st[l].sharedParams = &own
				}
				lp = st[l].sharedParams
			}
		}
		lr, err := d.run(ml.Config, lp, li, &st[l])
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		mr.layers[l] = lr
		aux += lr.res.AuxLoss
		x = lr.out
	}
	n := 0
	for b, xb := range x {
		s, _ := xb.Dims()
		logits := mat.NewDense(s, cfg.Vocab, nil)
		for i := 0; i < s; i++ {
			logits.SetRow(i, ref.HeadLogits(blk, p, xb.RawRowView(i)))
			if i < oracle.ValidLen(in.Valid, b, s) && in.Targets[b][i] != ref.IgnoreTarget {
				mr.ce += ref.CrossEntropy(logits.RawRowView(i), in.Targets[b][i])
				n++
			}
		}
		mr.logits = append(mr.logits, logits)
	}
	if n > 0 {
		mr.ce /= float64(n)
	}
	mr.loss = mr.ce + aux
	return mr, nil
}

func layerInput(a [][][]float64, l int) [][]float64 {
	if a == nil {
		return nil
	}
	return a[l]
}

// emulateModelCase recomputes a model case under each deviation, every
// routed layer having it.
func emulateModelCase(c *format.Case, w map[string]written, progress func(done, total int)) ([]emulation, error) {
	ems, devs, err := modelEmulations(c, w)
	if err != nil {
		return nil, err
	}
	s := modelSpecOf(c)
	err = emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, func(i int) (map[string]*format.Array, error) { return modelArrays(c, s, &devs[i]) })
	shareArrays(ems)
	return ems, err
}

// modelEmulations lists the emulations of a model case and their
// deviations, as layerEmulations does.
func modelEmulations(c *format.Case, w map[string]written) ([]emulation, []layerDeviation, error) {
	s := modelSpecOf(c)
	p, in, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return nil, nil, err
	}
	// ref checks the configuration, parameters and inputs once.
	if _, err := ref.ModelForward(s.Config, p, in); err != nil {
		return nil, nil, err
	}
	var ems []emulation
	devs := make([]layerDeviation, len(format.Deviations))
	for i, dev := range format.Deviations {
		ld, ok := findLayerDeviation(dev.Name)
		switch {
		case isMoDEDeviation(dev.Name):
			ems = append(ems, notEmulated(dev.Name, "a model case has no experts (mode cases test it)"))
		case !ok:
			ems = append(ems, notEmulated(dev.Name, "a model case has no incremental decoding (decode cases test it)"))
		case skipModel(s.Config, ld) != "":
			ems = append(ems, notEmulated(dev.Name, skipModel(s.Config, ld)))
		default:
			ems = append(ems, emulation{name: dev.Name})
		}
		ld.written = w
		devs[i] = ld
	}
	ems, devs = withTorchTopK(ems, devs)
	refuseFD(c, devs, ems)
	withScale(devs, ems)
	if err := shareEffective(c, devs, ems, routedConfigs(s.Config)); err != nil {
		return nil, nil, err
	}
	return ems, devs, nil
}

// routedConfigs lists the configurations of a model's routed layers.
func routedConfigs(cfg spec.ModelConfig) []spec.Config {
	var cfgs []spec.Config
	for _, ml := range cfg.Layers {
		if ml.Routed {
			cfgs = append(cfgs, ml.Config)
		}
	}
	return cfgs
}

// skipModel says why a deviation cannot be emulated for some routed layer of
// the model, or returns "".
func skipModel(cfg spec.ModelConfig, d layerDeviation) string {
	if d.sharedRouter {
		routed := routedConfigs(cfg)
		if len(routed) < 2 {
			return "the model has one routed layer: there is no router to share"
		}
		for _, c := range routed[1:] {
			if c.Router != routed[0].Router {
				return fmt.Sprintf("the routed layers' routers differ (%q, %q): one cannot stand for the other", routed[0].Router, c.Router)
			}
		}
	}
	for l, ml := range cfg.Layers {
		if !ml.Routed || d.skip == nil {
			continue
		}
		if why := d.skip(ml.Config); why != "" {
			return fmt.Sprintf("layer %d: %s", l, why)
		}
	}
	return ""
}

// modelArrays computes a model case's expected arrays under deviation d:
// forward values with each routed layer's routing decided by the deviant
// model itself, and gradients of the loss with those decisions frozen, by
// the routed layers' backward passes (modelArraysAnalytic) where d has
// them, else by finite differences (modelArraysFD).
func modelArrays(c *format.Case, s oracle.ModelSpec, d *layerDeviation) (map[string]*format.Array, error) {
	if d.swapQK {
		return swapQKArrays(c, d, func(c *format.Case, d *layerDeviation) (map[string]*format.Array, error) { return modelArrays(c, s, d) })
	}
	if d.hasBackward() {
		return modelArraysAnalytic(c, s, d)
	}
	return modelArraysFD(c, s, d)
}

// modelValueArrays are a model case's forward arrays of the evaluation mr
// under a deviation whose decided routings are st.
func modelValueArrays(c *format.Case, s oracle.ModelSpec, mr *modelRun, st []layerState) (map[string]*format.Array, error) {
	arrays := map[string]*format.Array{
		"expected.logits": oracle.BatchArray(mr.logits),
		"expected.ce":     format.Scalar(mr.ce),
		"expected.loss":   format.Scalar(mr.loss),
	}
	for l, lr := range mr.layers {
		if lr == nil {
			continue
		}
		pre := layerPrefix(l)
		sel, err := selectedLike(c, pre+"selected", st[l].writtenSelection(lr.res.Selection))
		if err != nil {
			return nil, err
		}
		arrays[pre+"selected"] = sel
		arrays[pre+"router_logits"] = oracle.FieldArray(lr.res.RouterWeights, s.Valid)
		arrays[pre+"aux.total"] = format.Scalar(lr.res.AuxLoss)
		if lr.cfg.HasPredictor() {
			arrays[pre+"predictor_logits"] = oracle.FieldArray(lr.res.PredictorLogits, s.Valid)
		}
		// The per-layer arrays (oracle.LayerStageArrays), as a layer
		// case's (layerValueArrays).
		arrays[pre+"weights"] = oracle.FieldArray(lr.res.Weights, s.Valid)
		arrays[pre+"multipliers"] = oracle.FieldArray(lr.mult, s.Valid)
		arrays[pre+"targets"] = oracle.FieldArray(lr.res.Targets, s.Valid)
		arrays[pre+"out"] = oracle.BatchArray(lr.out)
	}
	return arrays, nil
}

// modelStates are the undecided states of a model's layers under d, each
// with what the candidate wrote of it.
func (d *layerDeviation) modelStates(layers int) []layerState {
	st := make([]layerState, layers)
	for l := range st {
		st[l].written = d.writtenFor(layerPrefix(l))
	}
	return st
}

// modelForwardOf evaluates model case c under d on its draw, deciding
// each routed layer's routing into new states: the draw, the states and
// the forward arrays.
func modelForwardOf(c *format.Case, s oracle.ModelSpec, d *layerDeviation) (*ref.ModelParams, ref.ModelInputs, []layerState, map[string]*format.Array, error) {
	p, in, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return nil, in, nil, nil, err
	}
	st := d.modelStates(len(s.Config.Layers))
	mr, err := d.runModel(s.Config, p, in, st)
	if err != nil {
		return nil, in, nil, nil, err
	}
	arrays, err := modelValueArrays(c, s, mr, st)
	return p, in, st, arrays, err
}

// modelArraysFD is modelArrays with the gradients by ref.FDGradient over
// runModel (the backward passes' test oracle, and the way of a deviation
// that has none yet, at sizes within maxFDWork).
func modelArraysFD(c *format.Case, s oracle.ModelSpec, d *layerDeviation) (map[string]*format.Array, error) {
	p, in, st, arrays, err := modelForwardOf(c, s, d)
	if err != nil {
		return nil, err
	}
	loss := func() (float64, error) {
		mr, err := d.runModel(s.Config, p, in, st)
		if err != nil {
			return 0, err
		}
		return mr.loss, nil
	}
	for _, t := range p.Tensors() {
		g, err := oracle.Gradient(loss, t.Data, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gradient of param.%s: %w", t.Name, err)
		}
		arrays["grad.param."+t.Name] = g
	}
	return arrays, nil
}

// decodeVariant is a way incremental decoding can differ from the full
// causal forward (docs/spec.md §11, decode_mismatch).
type decodeVariant struct {
	name string
	// routeAll routes every token through every routed layer: routing off
	// at inference.
	routeAll bool
	// cacheSkipped appends a skipped token's keys and values to the layer's
	// cache.
	cacheSkipped bool
	// slotPositions rotates a routed token at its slot in the layer's cache
	// instead of its original position.
	slotPositions bool
	// windowSlots counts a routed layer's attention window in slots of its
	// cache instead of positions (RoPE still at the position): a routed
	// token attends to the last w tokens the layer cached, however far back.
	windowSlots bool
}

func decodeVariants() []decodeVariant {
	return []decodeVariant{
		{name: "routing off at inference", routeAll: true},
		{name: "skipped tokens cached", cacheSkipped: true},
		{name: "cache slots misaligned: RoPE at the cache slot, not the position", slotPositions: true},
		{name: "window counted in cache slots, not positions", windowSlots: true},
	}
}

// hasRoutedWindow reports whether some routed layer attends through a
// window over its own gathered tokens (not MLP-only).
func hasRoutedWindow(cfg spec.ModelConfig) bool {
	for _, ml := range cfg.Layers {
		if ml.Routed && ml.Config.Block.Window > 0 && !ml.Config.MLPOnly {
			return true
		}
	}
	return false
}

// emulateDecodeCase recomputes a decode case's token-by-token arrays under
// each decode_mismatch variant and each decodable layer deviation
// (decodeEmulations); the full causal forward stays the oracle's under a
// variant.
func emulateDecodeCase(c *format.Case) ([]emulation, error) {
	ems, compute, err := decodeEmulations(c)
	if err != nil {
		return nil, err
	}
	err = emulateEach(c, ems, nil, func(int) int { return 1 }, func(i int) (map[string]*format.Array, error) { return compute(i, nil) })
	return ems, err
}

// decodeEmulations lists a decode case's emulations, each with the reason
// it is not made or to be computed by compute(i, caught): a decode_mismatch
// variant decodes against the case's own full forward (decodeArrays), a
// layer deviation has it in the full forward and in decoding
// (decodeDeviantArrays), and with caught set, decodes only where the full
// forward's arrays do not already fail the case's comparison. Each
// computation reads its own copy of the case's parameters and inputs.
func decodeEmulations(c *format.Case) ([]emulation, func(i int, caught *forwardCatch) (map[string]*format.Array, error), error) {
	s := modelSpecOf(c)
	p, _, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return nil, nil, err
	}
	if _, err := ref.NewDecoder(s.Config, p); err != nil {
		return nil, nil, err
	}
	var ems []emulation
	var variants []*decodeVariant // decode_mismatch's variant of each emulation, or nil
	var devs []layerDeviation     // the layer deviation of each other one
	add := func(em emulation, v *decodeVariant, d layerDeviation) {
		ems, variants, devs = append(ems, em), append(variants, v), append(devs, d)
	}
	for _, dev := range format.Deviations {
		switch dev.Name {
		case "decode_mismatch":
			for _, v := range decodeVariants() {
				em := emulation{name: dev.Name, variant: v.name}
				if v.windowSlots && !hasRoutedWindow(s.Config) {
					em = notEmulated(dev.Name, "no routed layer attends through a window")
					em.variant = v.name
				}
				add(em, &v, layerDeviation{})
			}
		case "mode_ungated_experts":
			add(notEmulated(dev.Name, "a decode case has no experts (mode cases test it)"), nil, layerDeviation{})
		default:
			d, _ := findLayerDeviation(dev.Name)
			if why := decodeSkip(s.Config, d); why != "" {
				add(notEmulated(dev.Name, why), nil, d)
				continue
			}
			add(emulation{name: dev.Name}, nil, d)
		}
	}
	compute := func(i int, caught *forwardCatch) (map[string]*format.Array, error) {
		if v := variants[i]; v != nil {
			p, in, err := oracle.ModelDrawOf(c, s)
			if err != nil {
				return nil, err
			}
			arrays, err := decodeArraysUnder(c, s, p, in, *v, nil, expectedArrays(c), caught)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			return arrays, nil
		}
		d := devs[i]
		d.caught = caught
		return decodeDeviantArrays(c, s, d)
	}
	return ems, compute, nil
}

// decodeForwardArrays is a decode case's expected arrays with those of the
// full forward (the logits, each routed layer's selection, router weights
// and predictor logits) recomputed under d with parameters p.
func decodeForwardArrays(c *format.Case, s oracle.ModelSpec, p *ref.ModelParams, in ref.ModelInputs, d layerDeviation) (map[string]*format.Array, error) {
	arrays := expectedArrays(c)
	mr, err := d.runModel(s.Config, p, in, make([]layerState, len(s.Config.Layers)))
	if err != nil {
		return nil, err
	}
	arrays["expected.logits"] = oracle.BatchArray(mr.logits)
	for l, lr := range mr.layers {
		if lr == nil {
			continue
		}
		pre := layerPrefix(l)
		sel, err := selectedLike(c, pre+"selected", lr.res.Selection)
		if err != nil {
			return nil, err
		}
		arrays[pre+"selected"] = sel
		arrays[pre+"router_logits"] = oracle.FieldArray(lr.res.RouterWeights, s.Valid)
		if _, ok := arrays[pre+"predictor_logits"]; ok {
			arrays[pre+"predictor_logits"] = oracle.FieldArray(lr.res.PredictorLogits, s.Valid)
		}
	}
	return arrays, nil
}

// decodeArrays is arrays, a decode case's expected arrays, with
// expected.decode_logits and expected.L<l>.routed recomputed by a decoder
// with variant v.
func decodeArrays(c *format.Case, s oracle.ModelSpec, p *ref.ModelParams, in ref.ModelInputs, v decodeVariant, arrays map[string]*format.Array) (map[string]*format.Array, error) {
	return decodeArraysUnder(c, s, p, in, v, nil, arrays, nil)
}

// decodeArraysUnder is decodeArrays by a decoder whose routed layers also
// have the layer deviation d (decodeUpdate; nil for none).
//
// With early set, the decoding stops as soon as the tokens decoded so far
// fail the case's comparison (earlyFail, after each row's 1st, 2nd, 4th,
// 8th, … token and its last), early.byForward records that they did, and
// the arrays returned are not the whole decoding.
func decodeArraysUnder(c *format.Case, s oracle.ModelSpec, p *ref.ModelParams, in ref.ModelInputs, v decodeVariant, d *layerDeviation, arrays map[string]*format.Array, early *forwardCatch) (map[string]*format.Array, error) {
	vocab := s.Config.Vocab
	logits := make([]float64, 0, s.Batch*s.SeqLen*vocab)
	routed := make([][][]int, len(s.Config.Layers))
	for l := range routed {
		routed[l] = make([][]int, s.Batch)
	}
	for b, tokens := range in.Tokens {
		caches := make([]ref.KVCache, len(s.Config.Layers))
		for pos, tok := range tokens {
			x, err := v.step(s.Config, p, d, caches, tok, pos, routed, b)
			if err != nil {
				return nil, fmt.Errorf("row %d: %w", b, err)
			}
			logits = append(logits, ref.HeadLogits(s.Config.Block(), p, x)...)
			if early != nil && (pos&(pos+1) == 0 || pos == len(tokens)-1) {
				if early.byForward, err = earlyFail(c, s, logits, routed); err != nil || early.byForward {
					return arrays, err
				}
			}
		}
	}
	arrays["expected.decode_logits"] = format.Float(logits, s.Batch, s.SeqLen, vocab)
	for l, ml := range s.Config.Layers {
		if ml.Routed {
			arrays[fmt.Sprintf("expected.L%d.routed", l)] = oracle.IntGrid(routed[l])
		}
	}
	return arrays, nil
}

// earlyFail reports whether a decoding's first tokens (logits, flat in
// row-major order, and each routed layer's decisions routed[l][b]) fail
// decode case c's comparison: they are judged in place of the case's own
// values, the rest kept. The comparison is element by element
// (judge.Compare: a value fails alone, by its distance from the case's),
// so that tokens that fail it fail the whole decoding.
func earlyFail(c *format.Case, s oracle.ModelSpec, logits []float64, routed [][][]int) (bool, error) {
	want, err := c.Array("expected.decode_logits")
	if err != nil {
		return false, err
	}
	got := format.Float(slices.Clone(want.F), want.Shape...)
	copy(got.F, logits)
	arrays := map[string]*format.Array{"expected.decode_logits": got}
	for l, ml := range s.Config.Layers {
		if !ml.Routed {
			continue
		}
		name := fmt.Sprintf("expected.L%d.routed", l)
		want, err := c.Array(name)
		if err != nil {
			return false, err
		}
		flags := format.Int(slices.Clone(want.I), want.Shape...)
		for b, row := range routed[l] {
			for i, v := range row {
				flags.I[b*s.SeqLen+i] = int64(v)
			}
		}
		arrays[name] = flags
	}
	return failsOn(c, arrays)
}

// step decodes token tok at position pos through every layer, as ref.Decoder
// does but with the variant's fault and each routed layer with the layer
// deviation d (nil for none: its gate, its update formula, its scaling of
// a skipped token, decodeUpdate, and its router reading N1(x)), appends each layer's routing decision
// to routed[l][b] and returns the residual stream after the last layer.
func (v decodeVariant) step(cfg spec.ModelConfig, p *ref.ModelParams, d *layerDeviation, caches []ref.KVCache, tok, pos int, routed [][][]int, b int) ([]float64, error) {
	if tok < 0 || tok >= cfg.Vocab {
		return nil, fmt.Errorf("token %d at position %d, want 0 <= id < vocab = %d", tok, pos, cfg.Vocab)
	}
	blk := cfg.Block()
	x := ref.EmbedToken(p, tok, pos)
	add := func(g float64, f []float64) {
		for j := range x {
			x[j] += float64(g * f[j])
		}
	}
	for l, ml := range cfg.Layers {
		lp, kv := p.Layers[l], &caches[l]
		if !ml.Routed {
			add(1, kv.BlockStep(blk, &lp.Block, x, pos))
			routed[l][b] = append(routed[l][b], 1)
			continue
		}
		lc := ml.Config
		rx := x // what the router reads
		if d != nil && d.routerNormed {
			rx = normedRow(lc.Block, &lp.Block, x)
		}
		r, err := decodeRouterWeight(lc, lp, rx)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		score := r
		if lc.Causal == spec.CausalPredictor {
			score = ref.PredictorLogit(lp, x)
		}
		if math.IsNaN(score) {
			return nil, fmt.Errorf("layer %d: causal routing score is NaN at position %d", l, pos)
		}
		on := score > 0 || v.routeAll
		g, err := decodeWeight(lc.Weighting, r)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		if d != nil && d.tanhGate {
			g = 1 + float64(pmodAlpha*math.Tanh(r))
		}
		flag := 0
		if on {
			flag = 1
		}
		routed[l][b] = append(routed[l][b], flag)
		switch {
		case lc.MLPOnly:
			add(1, kv.AttentionStep(blk, &lp.Block, x, pos))
			switch {
			case on && d.changesUpdate():
				d.decodeUpdate(x, nil, ref.MLPUpdate(blk, &lp.Block, x), g)
			case on:
				add(g, ref.MLPUpdate(blk, &lp.Block, x))
			case d != nil && d.scaleSkipped:
				scaleRow(x, g)
			}
		case on && d.changesUpdate():
			at, bp := v.fed(blk, &lp.Block, routed[l][b], pos)
			a, m := kv.BlockStepParts(blk, bp, x, at)
			d.decodeUpdate(x, a, m, g)
		case on:
			at, bp := v.fed(blk, &lp.Block, routed[l][b], pos)
			add(g, kv.BlockStep(blk, bp, x, at))
		case v.cacheSkipped || d != nil && d.scaleSkipped:
			if v.cacheSkipped {
				kv.AttentionStep(blk, &lp.Block, x, pos)
			}
			if d != nil && d.scaleSkipped {
				scaleRow(x, g)
			}
		}
	}
	return x, nil
}

// fed is where a routed token at position pos is fed to its layer's cache
// under the variant, and the block parameters it is fed with: at pos; or,
// when the cache is misaligned or the window counts slots, at its slot
// (the tokens the layer routed before it, by routed, which holds its own
// flag last); with the window in slots alone, Wq and Wk rotated back to
// its position (see regather), so that RoPE still turns at pos.
func (v decodeVariant) fed(blk spec.BlockConfig, p *ref.BlockParams, routed []int, pos int) (int, *ref.BlockParams) {
	if !v.slotPositions && !v.windowSlots {
		return pos, p
	}
	// The slot: how many tokens this layer cached before (the cache
	// itself may have dropped some to a window).
	at := -1
	for _, f := range routed {
		at += f
	}
	if v.windowSlots && !v.slotPositions {
		p = rotatedBlock(blk, p, pos-at)
	}
	return at, p
}

// decodeRouterWeight is r for one token of a decodable layer (no noise, no
// jitter).
func decodeRouterWeight(c spec.Config, p *ref.LayerParams, x []float64) (float64, error) {
	switch c.Router {
	case spec.RouterLinear:
		return ref.RouterLinearWeight(p.Router, x), nil
	case spec.RouterLinearBias:
		return ref.RouterLinearBiasWeight(p.Router, p.RouterBias[0], x), nil
	case spec.RouterL2Norm:
		return ref.RouterL2NormWeight(x), nil
	}
	return 0, fmt.Errorf("router %q cannot decode", c.Router)
}

// decodeWeight is g of docs/spec.md §6 for the causal weightings.
func decodeWeight(w spec.Weighting, r float64) (float64, error) {
	switch w {
	case spec.WeightRaw:
		return r, nil
	case spec.WeightSigmoid:
		return ref.Sigmoid(r), nil
	case spec.WeightNone:
		return 1, nil
	}
	return 0, fmt.Errorf("weighting %q cannot decode", w)
}
