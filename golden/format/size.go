package format

import (
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/modref/modref/spec"
)

// MaxRecomputeWork bounds RecomputeWork, and so the time a case makes
// modref spend before it compares anything: check's self-check runs the
// case through mod, diagnose recomputes it under each deviation, a forward
// and a backward pass each (golden/diagnose_grad.go). 2^44 (1.8e13)
// multiply-adds: it accepts a layer at Llama-3-8B's width,
// docs/examples/llama3-8b-layer-s2048.json (d = 4096, 32 heads of 128
// sharing 8 key and value heads, SwiGLU d_ff = 14336, S = 2048, B = 1,
// capacity 12.5 %), counted at 9.1e12 (docs/performance.md gives its
// times), and the Llama-3-style layer of
// docs/examples/llama3-layer-d512-s2048.json at 4.6e11; a dense d = 2
// layer, one head, only up to S = 58000 or so. A deviation with no
// backward pass is bounded by MaxFDWork.
const MaxRecomputeWork = 1 << 44

// RecomputeWork is the estimate of the multiply-adds of recomputing a case
// under every deviation: recomputePasses forwards, each
// B·S·(4d² + 2·S·d + scoreCost·h·S + m·d·d_ff) per layer (h heads; m = 2,
// or 3 for SwiGLU, times E experts in a MoDE layer), plus B·S·d·vocab for
// a model's head; a layer case whose block runs only on the tokens top-k
// selects is counted at those (gatheredTokens, gatheredWork) (a MoDE case's one deviation, mode_ungated_experts, takes
// far fewer: its forward and a backward of one block pass per expert). The
// configuration must have been validated (spec's size bounds), so that no
// term overflows a float64's exact integers by much.
func RecomputeWork(m *Manifest) float64 {
	if k, ok := gatheredTokens(m); ok {
		return gatheredWork(m, k) * recomputePasses
	}
	fwd, _ := forwardWork(m)
	return (fwd + scoreWork(m)) * recomputePasses
}

// gatheredTokens is, for a layer case whose block runs on the k tokens
// each row's top-k selects (gather compute, top-k routing, attention
// routed too, a ratio or integer capacity), a bound on k that holds under
// every deviation: ⌈c·S⌉ + 1 (capacity_off_by_one takes one more), or
// C + 1, at most S. ok is false for every other case, whose block may run
// on every token.
func gatheredTokens(m *Manifest) (k float64, ok bool) {
	if m.Kind != KindLayer || m.Config.Layer == nil {
		return 0, false
	}
	cfg := *m.Config.Layer
	if cfg.Compute != spec.ComputeGather || cfg.Causal != spec.CausalOff || cfg.MLPOnly {
		return 0, false
	}
	s := float64(m.Config.SeqLen)
	switch cfg.Capacity.Kind {
	case spec.CapacityRatio:
		return min(math.Ceil(cfg.Capacity.Ratio*s)+1, s), true
	case spec.CapacityInteger:
		return min(float64(cfg.Capacity.Tokens)+1, s), true
	}
	return 0, false
}

// gatheredWork is RecomputeWork's forward pass of a layer case whose block
// runs on k tokens a row (gatheredTokens): the router and the norm at
// every token (2·d each), and the block at k tokens a row, its query and
// output projections (2d²), its key and value projections (2·d·d_kv, d_kv
// the key and value heads' width), its attention over k tokens (2·k·d and
// scoreCost·h·k) and its MLP (m·d·d_ff).
func gatheredWork(m *Manifest, k float64) float64 {
	cfg := m.Config
	b := cfg.Layer.Block
	d, dff, h := float64(b.D), float64(b.DFF), float64(b.Heads)
	dkv := d
	if b.KVHeads > 0 {
		dkv = d / h * float64(b.KVHeads)
	}
	mult := 2.0
	if b.MLP == spec.ActSwiGLU {
		mult = 3
	}
	rows := float64(cfg.Batch)
	perToken := float64(2*d*d) + float64(2*d*dkv) + float64(2*k*d) + float64(scoreCost*h*k) + float64(mult*d*dff)
	return float64(rows*float64(cfg.SeqLen)*4*d) + float64(rows*k*perToken)
}

// scoreWork is the scoreCost·h·S per token and layer of RecomputeWork:
// what attention costs beyond forwardWork's multiply-adds, which
// finite-difference gradients (FDWork, whose bound the corpus's catches
// depend on) leave out.
func scoreWork(m *Manifest) float64 {
	cfg := m.Config
	tokens := float64(cfg.Batch) * float64(cfg.SeqLen)
	perLayer := func(b spec.BlockConfig) float64 {
		return float64(tokens*scoreCost) * float64(b.Heads) * float64(cfg.SeqLen)
	}
	switch m.Kind {
	case KindLayer:
		return perLayer(cfg.Layer.Block)
	case KindMoDE:
		return perLayer(cfg.MoDE.Block)
	}
	mc := cfg.ModelConfig()
	return float64(len(mc.Layers)) * perLayer(mc.Block())
}

// recomputePasses is the number of forward passes that recomputing a case
// under every deviation costs, counted from golden/diagnose_grad.go: per
// deviation, the decision (LayerForward, and a frozen forward where the
// deviation changes it: at most 2), the kept forward (1), a regathered
// block (at most 1) and the backward passes of both (about 2 forwards
// each), so at most 8, for the up to 19 emulations a gathering case has
// (20 deviations and variants, some not emulated or shared; tanh_gate,
// skipped_scaled and aux_over_padding regather no block and take about 5),
// and the self-check's forward and backward in float32: 8·19 + 3 ≤ 160.
const recomputePasses = 160

// forwardWork is the multiply-adds of one forward pass of a case's
// configuration, and the number of coordinates a finite-difference
// gradient of it differentiates (the parameters, and for a layer-level
// case the input).
func forwardWork(m *Manifest) (fwd, coords float64) {
	cfg := m.Config
	tokens := float64(cfg.Batch) * float64(cfg.SeqLen)
	perLayer := func(b spec.BlockConfig, experts int) float64 {
		d, dff := float64(b.D), float64(b.DFF)
		mult := 2.0
		if b.MLP == spec.ActSwiGLU {
			mult = 3
		}
		return tokens * (float64(4*d*d) + float64(2*float64(cfg.SeqLen)*d) + float64(float64(mult*d*dff)*float64(experts)))
	}
	switch m.Kind {
	case KindLayer:
		fwd = perLayer(cfg.Layer.Block, 1)
		coords = float64(cfg.Layer.ParamCount()) + float64(tokens*float64(cfg.Layer.Block.D))
	case KindMoDE:
		fwd = perLayer(cfg.MoDE.Block, cfg.MoDE.Experts)
		coords = float64(cfg.MoDE.ParamCount()) + float64(tokens*float64(cfg.MoDE.Block.D))
	default:
		mc := cfg.ModelConfig()
		fwd = float64(float64(len(mc.Layers))*perLayer(mc.Block(), 1)) + float64(tokens*float64(mc.Block().D)*float64(mc.Vocab))
		coords = float64(mc.ParamCount())
	}
	return fwd, coords
}

// scoreCost is what one attention score costs in multiply-adds beyond the
// 2·d_h of its dot product and of its share of the weighted sum: its
// scaling, mask, exponential and normalisation, forward and backward, in
// ref's float64 code. Measured (gen --config of a layer with d = 2, one
// head, S = 2048, capacity 1: 2.7 s of CPU for 4.2e6 scores, against 7e9
// counted multiply-adds a second for a d = 256 layer) at about 28; without
// it, a d = 2 layer at S = 65536 counted 2.7e12 and took 20 minutes.
const scoreCost = 32

// MaxFDWork bounds FDWork: a deviation with no backward pass
// (golden/diagnose_grad.go's backwardNames) is emulated by finite differences
// only up to it, and refused above it (refuseFD). 2^31 multiply-adds: the
// slowest committed case, layer-capacity-floor, needed 1.8e9 when every
// deviation took finite differences (diagnose took 8-9 s of CPU on it).
const MaxFDWork = 1 << 31

// FDWork is the estimate of the multiply-adds of recomputing a case under
// one deviation with finite-difference gradients: (1 + 2·n) forwards for
// the n coordinates differentiated.
func FDWork(m *Manifest) float64 {
	fwd, coords := forwardWork(m)
	return fwd * (1 + float64(2*coords))
}

// ParamCount is the number of parameter values a validated manifest's
// configuration has.
func ParamCount(m *Manifest) int64 {
	switch m.Kind {
	case KindLayer:
		return m.Config.Layer.ParamCount()
	case KindMoDE:
		return m.Config.MoDE.ParamCount()
	}
	return m.Config.ModelConfig().ParamCount()
}

// CheckBounds checks what a validated manifest asks a reader to allocate
// and compute, before its arrays are read, and returns the number of
// values of each array it lists: the arrays together hold at most
// MaxCaseElements values, the configuration's parameters are exactly those
// its param.* arrays hold (so that a d_model or d_ff far above the arrays
// is refused), and recomputing the case takes at most MaxRecomputeWork.
func (m *Manifest) CheckBounds() (map[string]int, error) {
	counts := make(map[string]int, len(m.Arrays))
	total := 0
	for _, info := range m.Arrays {
		n := 1
		for _, d := range info.Shape {
			n = min(n*min(d, MaxCaseElements+1), MaxCaseElements+1) // no overflow: both factors ≤ 2^29+1
		}
		if total += n; n > MaxCaseElements || total > MaxCaseElements {
			return nil, fmt.Errorf("%w: the arrays it lists hold more than %d values together", ErrTooLarge, MaxCaseElements)
		}
		counts[info.Name] = n
	}
	if err := m.checkConfigSizes(counts); err != nil {
		return nil, err
	}
	return counts, nil
}

// checkConfigSizes checks a validated manifest's configuration against the
// arrays it lists, whose element counts are counts (each already within
// MaxCaseElements), and against MaxRecomputeWork.
func (m *Manifest) checkConfigSizes(counts map[string]int) error {
	var listed int64
	for name, n := range counts {
		if strings.HasPrefix(name, "param.") {
			listed += int64(n)
		}
	}
	if want := ParamCount(m); want != listed {
		return fmt.Errorf("%w: the configuration has %d parameter values, its param.* arrays hold %d", ErrManifestArrays, want, listed)
	}
	if w, most := RecomputeWork(m), float64(MaxRecomputeWork); w > most {
		return fmt.Errorf("%w: recomputing the case would take about %.3g multiply-adds, more than the %d accepted (batch %d, seq_len %d, the configuration's sizes)",
			ErrTooLarge, w, int64(most), m.Config.Batch, m.Config.SeqLen)
	}
	return nil
}

// CaseValues estimates the values a case of m's configuration holds.
// certain counts only arrays every case of its kind has: its parameters and
// their gradients, a layer case's input.x, upstream.out, expected.out and
// grad.input.x, a model case's expected.logits and each routed layer's
// expected.L<l>.out; a lower bound, which
// DecodeGenConfig holds to maxCaseElements before anything is generated.
// estimate adds about ten B×S arrays per layer (routing values, tokens and
// targets, noise), for the memory estimate.
func CaseValues(m *Manifest) (certain, estimate float64) {
	cfg := m.Config
	tokens := float64(cfg.Batch) * float64(cfg.SeqLen)
	certain = 2 * float64(ParamCount(m))
	layers := 1.0
	switch m.Kind {
	case KindLayer:
		certain += float64(4 * tokens * float64(cfg.Layer.Block.D))
	case KindMoDE:
		certain += float64(4 * tokens * float64(cfg.MoDE.Block.D))
		layers = float64(cfg.MoDE.Experts)
	case KindModel:
		certain += float64(tokens * float64(cfg.Vocab))
		layers = float64(len(cfg.Layers))
		for _, l := range cfg.Layers {
			if l.Routed {
				certain += float64(tokens * float64(l.Config.Block.D)) // expected.L<l>.out
			}
		}
	default:
		estimate += float64(tokens * float64(cfg.Vocab))
		layers = float64(len(cfg.Layers))
	}
	return certain, estimate + certain + float64(10*tokens*layers)
}

// minGapBytes is the fewest bytes one routing gap takes in a manifest
// (Manifest.encode: its indent, a digit, a comma and a newline).
const minGapBytes = 9

// MinManifestBytes is the fewest bytes the routing gaps of a case of m's
// configuration take in its manifest: one per batch row and routed layer.
func MinManifestBytes(m *Manifest) float64 {
	cfg := m.Config
	routed := 1
	if m.Kind == KindModel || m.Kind == KindDecode {
		routed = 0
		for _, l := range cfg.Layers {
			if l.Routed {
				routed++
			}
		}
	}
	return float64(cfg.Batch) * float64(routed) * minGapBytes
}

// MaxGenMemory bounds the memory estimated (GenMemory) for generating a
// case and measuring its catches (`modref gen --config`): 16 GiB, two
// thirds of the 24 GB machine the production shapes were measured on
// (docs/performance.md). A layer at Llama-3-8B's width
// (docs/examples/llama3-8b-layer-s2048.json) is estimated at 15.1 GiB with
// one emulation at a time (17.8 GiB with two, measured at 18.5 GB); the
// Llama-3-style example at d = 512 at 1.6 GiB, measured at 1.3 GB; 3·10^6
// tokens of a tiny layer pass it.
const MaxGenMemory = 16 << 30

// retainedCopies and tokenBytes are GenMemory's model of measuring the
// catches of a model, decode or MoDE case, fitted with room to spare to
// peak RSS measured on gen --config (2 emulations at once): the case's
// values are held about 20 times over (the case, and each emulation's
// expected arrays until all are done: 984 MB for a model of 6.3e6 values
// at vocab 2^16, 191 MB for a d = 256 layer of 1.6e6, before a layer
// case's emulations were judged as they finish), and an emulation's
// forward and backward state takes about 3.5 KB per token and layer
// besides (324 MB for a d = 2 layer at B = 16384, S = 2).
const (
	retainedCopies = 24
	tokenBytes     = 8 << 10
)

// streamedCopies and stateWidths are GenMemory's model of a layer case,
// whose emulations are judged as each finishes and then dropped
// (golden/diagnose): the case's values are held about streamedCopies
// times (the case, whose parameter and gradient arrays are the truth's
// own, its encoding for the file, and garbage not yet collected), and an
// emulation holds its expected arrays (the parameters' gradients and the
// B×S×d arrays, about half the case) and about stateWidths B×S×d arrays
// of forward and backward state, with tokenBytes a token besides. Fitted
// to the d = 512 example (1.3 GB measured, 1.6 GiB estimated, two
// emulations at once) and the layer at Llama-3-8B's width (18.5 GB
// measured with two at once, estimated at 19.1 GB; docs/performance.md).
const (
	streamedCopies = 3.5
	stateWidths    = 16
)

// GenMemory is the estimate, in bytes, of the memory of generating a case
// of m's configuration and measuring its catches: fixed for the case and
// the arrays held, and perEmulation for each emulation computed at once.
func GenMemory(m *Manifest) (fixed, perEmulation float64) {
	certain, values := CaseValues(m)
	cfg := m.Config
	tokens := float64(cfg.Batch) * float64(cfg.SeqLen)
	if m.Kind == KindLayer {
		fixed = 64<<20 + float64(8*values*streamedCopies)
		perEmulation = float64(8*(float64(certain/2)+float64(stateWidths*tokens*float64(cfg.Layer.Block.D)))) + float64(tokenBytes*tokens)
		return fixed, perEmulation
	}
	layers := 1.0
	if m.Kind == KindModel || m.Kind == KindDecode {
		layers = float64(len(cfg.Layers))
	}
	fixed = 64<<20 + float64(8*values*retainedCopies)
	perEmulation = float64(16*values) + float64(tokenBytes*tokens*layers)
	return fixed, perEmulation
}

// ParallelEmulations is how many emulations of a case of m's
// configuration emulateEach computes at once: one per processor
// (GOMAXPROCS), fewer when their memory (genMemory) would take the total
// past maxGenMemory, and at least one. The results do not depend on it.
func ParallelEmulations(m *Manifest) int {
	fixed, per := GenMemory(m)
	n := min(float64(runtime.GOMAXPROCS(0)), (MaxGenMemory-fixed)/per)
	return max(int(n), 1)
}
