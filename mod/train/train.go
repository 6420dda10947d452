package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/spec"
)

// Trainer trains a mod.Model on a text, one step at a time. It is not safe
// for concurrent use.
type Trainer struct {
	cfg       Config
	text      TextInfo
	trainPart []byte
	evalPart  []byte

	model  *mod.Model
	params []*autograd.Tensor
	opt    *nn.AdamW
	// src draws the batches, router noise and jitter; its state is saved
	// in checkpoints.
	src *rand.PCG
	rng *rand.Rand
	tp  autograd.Tape

	step    int
	tokens  int64
	flops   float64
	wall    time.Duration
	metrics Metrics

	// ids, in and layers are reused from step to step, so that a step
	// allocates nothing but the growth of its history: the batch's byte
	// ids with its token and target rows (views of ids), and the layer
	// summaries of every step so far (each Step's Layers is a full slice
	// of it, which a later append never writes into).
	ids    []int
	in     mod.ModelInputs
	layers []Layer

	// evalProgress, when set, is called after each batch of an evaluation.
	evalProgress func(done, total int)
}

// New returns a trainer at step 0 for cfg on text, or an error naming what
// does not fit: a field of cfg, or a text too short for cfg.
func New(cfg Config, text Text) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("train: config: %w", err)
	}
	tr, ev, err := split(text, cfg)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	m, err := mod.NewModel(cfg.Model, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	params := mod.Tensors(m.Params())
	ac, _ := cfg.adamW()
	opt, err := nn.NewAdamW(params, ac)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	// The model draws from stream 0 of the seed; batches from stream 1.
	src := rand.NewPCG(cfg.Seed, 1)
	return &Trainer{cfg: cfg, text: text.Info(), trainPart: tr, evalPart: ev,
		model: m, params: params, opt: opt, src: src, rng: rand.New(src)}, nil
}

// Config returns the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Model returns the model being trained (its parameters change with every
// step).
func (t *Trainer) Model() *mod.Model { return t.model }

// Text returns the identity of the text trained on.
func (t *Trainer) Text() TextInfo { return t.text }

// StepsDone returns the number of steps taken.
func (t *Trainer) StepsDone() int { return t.step }

// Done reports whether every step of the configuration has been taken,
// with its evaluations.
func (t *Trainer) Done() bool { return t.step >= t.cfg.Steps && !t.evalDue() }

// evalDue reports whether the evaluation after the last step taken is due
// and not yet made: after every EvalEvery steps and after the last, an
// evaluation that an interruption (Run's context) stopped is made by the
// next Run.
func (t *Trainer) evalDue() bool {
	if t.step == 0 || !(t.step >= t.cfg.Steps || (t.cfg.EvalEvery > 0 && t.step%t.cfg.EvalEvery == 0)) {
		return false
	}
	evs := t.metrics.Evals
	return len(evs) == 0 || evs[len(evs)-1].Step != t.step
}

// SetEvalProgress makes the trainer call progress after each batch of an
// evaluation, with the batches done and their total (EvalBatches); nil
// stops it.
func (t *Trainer) SetEvalProgress(progress func(done, total int)) { t.evalProgress = progress }

// Metrics returns the measurements so far (shared, not copied).
func (t *Trainer) Metrics() *Metrics { return &t.metrics }

// Run takes the remaining steps, evaluating every EvalEvery steps and after
// the last, and calls progress (if not nil) after each step. It returns
// ctx.Err() when ctx is cancelled, between two steps or between two
// batches of an evaluation, with the trainer in a state that Save can write
// and a later Run can continue from (an evaluation stopped halfway is made
// again whole, with the same result); and an error when the loss is not
// finite.
func (t *Trainer) Run(ctx context.Context, progress func(Step)) error {
	for !t.Done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.evalDue() {
			if err := t.evaluateDue(ctx); err != nil {
				return err
			}
			continue
		}
		s, err := t.takeStep(ctx)
		if err != nil {
			return err
		}
		if progress != nil {
			progress(s)
		}
	}
	return nil
}

// Run trains a model for cfg on text to the end and returns it with its
// metrics: New followed by Trainer.Run.
func Run(ctx context.Context, cfg Config, text Text) (*mod.Model, *Metrics, error) {
	t, err := New(cfg, text)
	if err != nil {
		return nil, nil, err
	}
	if err := t.Run(ctx, nil); err != nil {
		return t.model, &t.metrics, err
	}
	return t.model, &t.metrics, nil
}

// Step takes one optimiser step (and the evaluation due after it) and
// returns its measurements.
func (t *Trainer) Step() (Step, error) { return t.takeStep(context.Background()) }

// takeStep is Step with an evaluation that stops, with ctx.Err(), when ctx is
// cancelled; the step itself is taken whole.
func (t *Trainer) takeStep(ctx context.Context) (Step, error) {
	if t.step >= t.cfg.Steps {
		return Step{}, fmt.Errorf("train: all %d steps are taken", t.cfg.Steps)
	}
	if t.evalDue() { // stopped by an earlier interruption
		if err := t.evaluateDue(ctx); err != nil {
			return Step{}, err
		}
	}
	start := time.Now()
	lr := t.cfg.lrAt(t.step)
	t.opt.LR = lr
	in := t.batch()
	t.tp.Reset()
	t.opt.ZeroGrad()
	res, err := t.model.Forward(&t.tp, in)
	if err != nil {
		return Step{}, fmt.Errorf("train: step %d: %w", t.step+1, err)
	}
	if math.IsNaN(res.CE) || math.IsInf(res.CE, 0) {
		return Step{}, fmt.Errorf("train: step %d: the loss is %v; lower the learning rate (LR = %v) or clip the gradient", t.step+1, res.CE, lr)
	}
	t.tp.Backward(res.Loss)
	norm := clipGradients(t.params, t.cfg.Clip)
	t.opt.Step()
	t.wall += time.Since(start)
	t.step++
	t.tokens += int64(t.cfg.Batch * t.cfg.SeqLen)
	t.flops += float64(3 * float64(res.FLOPs.Total))
	from := len(t.layers)
	t.layers = appendLayerMetrics(t.layers, res)
	s := Step{Step: t.step, Tokens: t.tokens, FLOPs: t.flops, WallSeconds: t.wall.Seconds(), LR: lr,
		Loss: res.CE, Aux: res.Aux, GradNorm: norm, Layers: t.layers[from:len(t.layers):len(t.layers)]}
	t.metrics.Steps = append(t.metrics.Steps, s)
	if t.evalDue() {
		if err := t.evaluateDue(ctx); err != nil {
			return s, err
		}
	}
	return s, nil
}

// evaluateDue makes the evaluation due after the last step and records it.
func (t *Trainer) evaluateDue(ctx context.Context) error {
	e, err := t.evaluate(ctx, t.model, t.evalProgress)
	if err != nil {
		return err
	}
	t.metrics.Evals = append(t.metrics.Evals, e)
	return nil
}

// batch draws Batch windows of SeqLen+1 bytes from the training part at
// uniformly random offsets, and the router noise and jitter the
// configuration needs.
func (t *Trainer) batch() mod.ModelInputs {
	w := t.cfg.SeqLen + 1
	if t.ids == nil {
		t.ids = make([]int, t.cfg.Batch*w)
		t.in = mod.ModelInputs{Tokens: make([][]int, t.cfg.Batch), Targets: make([][]int, t.cfg.Batch)}
	}
	for b := range t.cfg.Batch {
		off := t.rng.IntN(len(t.trainPart) - t.cfg.SeqLen)
		t.in.Tokens[b], t.in.Targets[b] = window(t.ids[b*w:(b+1)*w], t.trainPart[off:off+w])
	}
	t.in.Noise, t.in.Jitter = noise(t.model, t.cfg.Batch*t.cfg.SeqLen, t.rng, true)
	return t.in
}

// noise returns the per-layer router noise (random routers) and jitter eps
// (Jitter > 0) of m's layers for n tokens, drawn from rng; without
// training, the jitter is zero.
func noise(m *mod.Model, n int, rng *rand.Rand, training bool) (noise, jitter [][]float32) {
	draw := func(zero bool) []float32 {
		v := make([]float32, n)
		if !zero {
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
		}
		return v
	}
	for l, rl := range m.Layers {
		if rl == nil {
			continue
		}
		if rl.Config().Router == spec.RouterRandom {
			if noise == nil {
				noise = make([][]float32, len(m.Layers))
			}
			noise[l] = draw(false)
		}
		if rl.Config().Jitter > 0 {
			if jitter == nil {
				jitter = make([][]float32, len(m.Layers))
			}
			jitter[l] = draw(!training)
		}
	}
	return noise, jitter
}

// window splits SeqLen+1 bytes into tokens and next-token targets.
func window(ids []int, b []byte) (tokens, targets []int) {
	ids = ids[:len(b)]
	for i, c := range b {
		ids[i] = int(c)
	}
	return ids[:len(ids)-1], ids[1:]
}

// Evaluate returns the mean next-token loss and routing of the model on
// EvalBatches batches of the held-out text: Batch·EvalBatches windows at
// evenly spaced offsets, the same at every evaluation. It does not change
// the trainer's state (a random router's noise comes from a generator of
// its own, seeded the same way every time).
func (t *Trainer) Evaluate() (Eval, error) { return t.EvaluateModel(t.model) }

// EvaluateModel is Evaluate for another model of the same configuration,
// such as CausalModel(t.Model(), ...), which routes causally.
func (t *Trainer) EvaluateModel(m *mod.Model) (Eval, error) {
	return t.evaluate(context.Background(), m, nil)
}

// evaluate is EvaluateModel, stopped with ctx.Err() between two batches
// when ctx is cancelled, calling progress (if not nil) after each batch.
func (t *Trainer) evaluate(ctx context.Context, m *mod.Model, progress func(done, total int)) (Eval, error) {
	n := t.cfg.Batch * t.cfg.EvalBatches
	span := len(t.evalPart) - t.cfg.SeqLen - 1
	rng := rand.New(rand.NewPCG(t.cfg.Seed, 2))
	var loss float64
	var layers [][]Layer
	var tp autograd.Tape
	for e := range t.cfg.EvalBatches {
		if err := ctx.Err(); err != nil {
			return Eval{}, err
		}
		in := mod.ModelInputs{Tokens: make([][]int, t.cfg.Batch), Targets: make([][]int, t.cfg.Batch)}
		for b := range t.cfg.Batch {
			off := 0
			if n > 1 {
				off = (e*t.cfg.Batch + b) * span / (n - 1)
			}
			in.Tokens[b], in.Targets[b] = window(make([]int, t.cfg.SeqLen+1), t.evalPart[off:off+t.cfg.SeqLen+1])
		}
		in.Noise, in.Jitter = noise(m, t.cfg.Batch*t.cfg.SeqLen, rng, false)
		tp.Reset()
		res, err := m.Forward(&tp, in)
		if err != nil {
			return Eval{}, fmt.Errorf("train: evaluation after step %d: %w", t.step, err)
		}
		loss += res.CE
		layers = append(layers, appendLayerMetrics(nil, res))
		if progress != nil {
			progress(e+1, t.cfg.EvalBatches)
		}
	}
	return Eval{Step: t.step, Tokens: t.tokens, FLOPs: t.flops, WallSeconds: t.wall.Seconds(),
		Loss: loss / float64(t.cfg.EvalBatches), Layers: meanLayers(layers)}, nil
}

// clipGradients returns the global norm of the gradients of ps, summed in
// float64 in parameter order, and scales every gradient by max/norm when the
// norm exceeds max > 0.
func clipGradients(ps []*autograd.Tensor, max float64) float64 {
	var ss float64
	for _, p := range ps {
		for _, g := range p.Grad {
			ss += float64(float64(g) * float64(g))
		}
	}
	norm := math.Sqrt(ss)
	if max > 0 && norm > max {
		scale := float32(max / norm)
		for _, p := range ps {
			for i := range p.Grad {
				p.Grad[i] *= scale
			}
		}
	}
	return norm
}

// HeldOut returns the held-out part of the text (shared, not copied).
func (t *Trainer) HeldOut() []byte { return t.evalPart }
