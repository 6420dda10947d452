package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/modref/modref/internal/elem"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/spec"
)

// Vocab is the vocabulary of the byte-level tokenizer: token id = byte value.
const Vocab = 256

// Config is everything that determines a training run. Two runs with the
// same Config on the same text compute the same bits, on any GOMAXPROCS.
type Config struct {
	// Model is the language model; its Vocab must be 256 (bytes).
	Model spec.ModelConfig
	// Seed draws the parameters (mod.NewModel), the batches and the router
	// noise and jitter of training.
	Seed uint64
	// Steps is the number of optimiser steps of the whole run.
	Steps int
	// Batch is the number of sequences per step, SeqLen their length in
	// tokens (each sequence is SeqLen+1 consecutive bytes of the text: the
	// tokens and their next-token targets).
	Batch, SeqLen int
	// LR is the peak learning rate, reached linearly over Warmup steps and
	// then decayed along a half cosine to MinLR at the last step.
	LR, MinLR float64
	// Warmup is the number of warm-up steps, 0 <= Warmup <= Steps.
	Warmup int
	// Beta1, Beta2, Eps and WeightDecay are AdamW's (see nn.AdamW).
	Beta1, Beta2, Eps, WeightDecay float64
	// Clip is the largest global gradient norm (over every parameter); a
	// larger gradient is scaled down to it. 0 disables clipping.
	Clip float64
	// EvalEvery is the number of steps between evaluations on the held-out
	// text (and one after the last step); 0 evaluates only after the last.
	EvalEvery int
	// EvalBatches is the number of batches of Batch sequences an evaluation
	// averages over.
	EvalBatches int
	// HoldOut is the fraction of the text, at its end, held out for
	// evaluation, in (0, 0.5].
	HoldOut float64
}

// ModelConfig returns a byte-level language model of layers pre-norm
// blocks of width d with heads heads and an MLP of width 4d (RMSNorm, GELU,
// RoPE), routed as routing says where pattern says; dense when pattern lists
// no layer (spec.Pattern{Kind: spec.PatternList}).
func ModelConfig(d, heads, layers int, routing spec.Config, pattern spec.Pattern) (spec.ModelConfig, error) {
	routing.Block = spec.DefaultBlockConfig(d, heads, 4*d)
	return spec.NewModelConfig(Vocab, 0, layers, routing, pattern, nil)
}

// MoDRouting returns the paper's routed layer at capacity ratio c (linear
// router, raw weighting, gather compute, top-k routing) with the auxiliary
// predictor of docs/spec.md §8 trained beside it (weight 0.1; it reads
// sg(x), so it does not change the language model), ready to sample with
// causal routing.
func MoDRouting(c float64) spec.Config {
	r := spec.DefaultConfig(spec.BlockConfig{}, c)
	r.Aux = spec.AuxPredictor
	r.AuxWeight = 0.1
	return r
}

// OddLayers routes every other layer starting with the second (layers 1,
// 3, 5, ...). The first layer's router reads the token embeddings, whose
// small initial scale (N(0, 0.02²)) keeps its weights r, and so its
// contribution r·f and its gradients, near zero for a long time at this
// size: routing layers 0 and 2 instead, the predictor of layer 0 recalled
// 14 % of the top-k choices after 400 steps against 65 % for layer 1
// (docs/results.md).
var OddLayers = spec.Pattern{Kind: spec.PatternEveryNth, Every: 2, Offset: 1}

// DefaultConfig returns the tiny model this package's documentation and
// docs/results.md use: d = 64, 4 heads, 4 layers, MoD on every other layer
// (OddLayers) at capacity 12.5 % with the predictor; 256 steps of 8 sequences of 64
// bytes, learning rate 3e-3 with 32 warm-up steps decaying to 3e-4, AdamW
// β = (0.9, 0.95), weight decay 0.1, clipping at 1, an evaluation every 32
// steps on 4 batches of the last 10 % of the text.
func DefaultConfig() Config {
	m, err := ModelConfig(64, 4, 4, MoDRouting(0.125), OddLayers)
	if err != nil {
		panic("train.DefaultConfig: " + err.Error())
	}
	return Config{
		Model: m, Seed: 1, Steps: 256, Batch: 8, SeqLen: 64,
		LR: 3e-3, MinLR: 3e-4, Warmup: 32,
		Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Clip: 1,
		EvalEvery: 32, EvalBatches: 4, HoldOut: 0.1,
	}
}

// Bounds of a training configuration (docs/training.md, "Bounds"):
// Validate refuses a size above its bound, and a configuration whose
// EstimatedBytes exceed MaxMemoryBytes, before anything is allocated. The
// model's sizes have spec's bounds (spec.MaxD, spec.MaxDFF,
// spec.MaxLayers, spec.MaxPositions).
const (
	// MaxSteps bounds Steps: 2^20 (the default run takes 256); the history
	// they imply (the metrics of every step, kept in memory and written to
	// train.jsonl) is counted in EstimatedBytes.
	MaxSteps = 1 << 20
	// MaxBatch bounds Batch: 2^12 sequences per step.
	MaxBatch = 1 << 12
	// MaxSeqLen bounds SeqLen: 2^16 bytes per sequence.
	MaxSeqLen = 1 << 16
	// MaxEvalBatches bounds EvalBatches: 2^12 batches per evaluation.
	MaxEvalBatches = 1 << 12
	// MaxMemoryBytes bounds EstimatedBytes: 4 GiB, the memory of a small
	// machine.
	MaxMemoryBytes = 4 << 30
)

// MaxConfigBytes bounds the size of a file holding a Config: a `modref
// train --config` file or a checkpoint's config.json (which Save writes
// indented). 1 MiB: a configuration of spec.MaxLayers layers takes about
// 0.7 MiB indented (TestMaxConfigBytes), the default one under 4 KB.
const MaxConfigBytes = 1 << 20

// MetricsBytes bounds the size of the metrics files of a checkpoint of c
// (train.jsonl and eval.jsonl): at most a step's and an evaluation's line,
// each under bytesPerStep + bytesPerStepLayer·layers, per step. Validate
// keeps it within the history term of EstimatedBytes, so within
// MaxMemoryBytes.
func (c Config) MetricsBytes() int64 {
	return int64(c.Steps) * (bytesPerStep + bytesPerStepLayer*int64(len(c.Model.Layers)))
}

// The terms of EstimatedBytes, fitted above the peak resident memory of
// modref train in eight runs (docs/training.md, "Bounds", gives them;
// the Go collector lets the heap grow to about twice what is live, and the
// figures include that): bytes per parameter (value, gradient and AdamW's
// two moments, float32, and the copies a checkpoint save encodes); float32
// values kept per token of a step by each layer per unit of d, of d_ff and
// of heads (the attention keeps O(T·h) numbers, not its T×T scores:
// autograd.CausalAttention) and per layer, and by the LM head per
// vocabulary entry; the bytes of history per step and per step and layer
// (in memory and as JSON); and the program itself.
const (
	bytesPerParam     = 96
	perTokenD         = 64
	perTokenDFF       = 16
	perTokenHead      = 64
	perTokenLayer     = 256
	perTokenVocab     = 16
	bytesPerStep      = 512
	bytesPerStepLayer = 512
	programBytes      = 64 << 20
	float32Bytes      = 4
)

// EstimatedBytes is the memory a run of c is expected to need at its peak,
// from its sizes alone (docs/training.md, "Bounds"): every term in
// float64, so that no product of sizes overflows. Measured runs stay below
// it (TestTrainMemoryEstimate in cmd/modref checks one).
func (c Config) EstimatedBytes() float64 {
	b := c.Model.Block()
	d, dff, heads := float64(b.D), float64(b.DFF), float64(b.Heads)
	layers := float64(len(c.Model.Layers))
	tokens := float64(c.Batch) * float64(c.SeqLen)
	params := float64(c.Model.ParamCount())
	perLayer := float64(perTokenD*d) + float64(perTokenDFF*dff) + float64(perTokenHead*heads) + perTokenLayer
	activations := float64(float32Bytes * tokens * (float64(layers*perLayer) + float64(perTokenVocab*float64(c.Model.Vocab))))
	history := float64(float64(c.Steps) * (bytesPerStep + float64(bytesPerStepLayer*layers)))
	return programBytes + float64(bytesPerParam*params) + activations + history
}

// Validate returns an error naming the first field of c that cannot work,
// or the bound it exceeds.
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return fmt.Errorf("Model: %w", err)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	over := func(field string, v, bound int) error {
		return fmt.Errorf("%s = %d exceeds the bound %d (train.Max%s)", field, v, bound, field)
	}
	switch {
	case c.Model.Vocab != Vocab:
		return fmt.Errorf("Model.Vocab = %d, want %d (the tokenizer is byte-level)", c.Model.Vocab, Vocab)
	case c.Steps < 1:
		return fmt.Errorf("Steps = %d, want >= 1", c.Steps)
	case c.Steps > MaxSteps:
		return over("Steps", c.Steps, MaxSteps)
	case c.Batch < 1:
		return fmt.Errorf("Batch = %d, want >= 1", c.Batch)
	case c.Batch > MaxBatch:
		return over("Batch", c.Batch, MaxBatch)
	case c.SeqLen < 1:
		return fmt.Errorf("SeqLen = %d, want >= 1", c.SeqLen)
	case c.SeqLen > MaxSeqLen:
		return over("SeqLen", c.SeqLen, MaxSeqLen)
	case c.Model.Block().Positions == spec.PositionLearned && c.SeqLen > c.Model.MaxLen:
		return fmt.Errorf("SeqLen = %d exceeds Model.MaxLen = %d learned positions", c.SeqLen, c.Model.MaxLen)
	case !(c.LR > 0) || !finite(c.LR):
		return fmt.Errorf("LR = %v, want a finite value > 0", c.LR)
	case !(c.MinLR >= 0 && c.MinLR <= c.LR):
		return fmt.Errorf("MinLR = %v, want 0 <= MinLR <= LR = %v", c.MinLR, c.LR)
	case c.Warmup < 0 || c.Warmup > c.Steps:
		return fmt.Errorf("Warmup = %d, want 0 <= Warmup <= Steps = %d", c.Warmup, c.Steps)
	case !(c.Clip >= 0) || !finite(c.Clip):
		return fmt.Errorf("Clip = %v, want a finite value >= 0 (0 disables clipping)", c.Clip)
	case c.EvalEvery < 0:
		return fmt.Errorf("EvalEvery = %d, want >= 0 (0 evaluates after the last step only)", c.EvalEvery)
	case c.EvalBatches < 1:
		return fmt.Errorf("EvalBatches = %d, want >= 1", c.EvalBatches)
	case c.EvalBatches > MaxEvalBatches:
		return over("EvalBatches", c.EvalBatches, MaxEvalBatches)
	case !(c.HoldOut > 0 && c.HoldOut <= 0.5):
		return fmt.Errorf("HoldOut = %v, want a fraction in (0, 0.5]", c.HoldOut)
	}
	if _, err := c.adamW(); err != nil {
		return err
	}
	for l, ml := range c.Model.Layers {
		if !ml.Routed {
			continue
		}
		if _, err := mod.Capacity(ml.Config.Capacity, c.SeqLen, c.SeqLen); err != nil {
			return fmt.Errorf("Model layer %d at SeqLen = %d: %w", l, c.SeqLen, err)
		}
	}
	if est := c.EstimatedBytes(); est > MaxMemoryBytes {
		b := c.Model.Block()
		return fmt.Errorf("the run would need about %.3g GiB, more than the bound of %d GiB (train.MaxMemoryBytes): %d parameters (d = %d, d_ff = %d, %d layers) and %d tokens per step (Batch = %d × SeqLen = %d), %d steps of history (docs/training.md, \"Bounds\")",
			est/(1<<30), MaxMemoryBytes>>30, c.Model.ParamCount(), b.D, b.DFF, len(c.Model.Layers), c.Batch*c.SeqLen, c.Batch, c.SeqLen, c.Steps)
	}
	return nil
}

// DecodeConfig reads a Config in JSON (the form json.Marshal gives) over
// *c: the fields raw holds replace c's, the others keep their values. A
// field Config does not have, or anything after the JSON object, is an
// error. It does not validate: Validate (which New calls) does, after the
// caller's own changes.
func DecodeConfig(raw []byte, c *Config) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

// lrAt is the learning rate of step s (0-based): linear warm-up from LR/Warmup
// to LR over the first Warmup steps, then a half cosine from LR down to MinLR
// at the last step.
func (c Config) lrAt(s int) float64 {
	if s < c.Warmup {
		return c.LR * float64(s+1) / float64(c.Warmup)
	}
	n := c.Steps - c.Warmup
	if n <= 1 {
		return c.LR
	}
	p := float64(s-c.Warmup) / float64(n-1)
	return c.MinLR + float64(0.5*(c.LR-c.MinLR)*(1+elem.Cos(math.Pi*p)))
}

// adamW returns the optimiser's hyperparameters at the peak learning rate,
// or an error naming the one out of range.
func (c Config) adamW() (nn.AdamWConfig, error) {
	a := nn.AdamWConfig{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
	if _, err := nn.NewAdamW(nil, a); err != nil {
		return a, err
	}
	return a, nil
}
