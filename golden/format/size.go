package format

import (
	"fmt"
	"strings"

	"github.com/modref/modref/spec"
)

// MaxRecomputeWork bounds RecomputeWork, and so the time and memory a case
// makes modref spend before it compares anything: check's self-check runs
// the case through mod, diagnose recomputes it under each deviation, a
// forward and a backward pass each (golden/diagnose_grad.go). 2^43 (8.8e12)
// multiply-adds: it accepts a production-shaped case with room to spare,
// the Llama-3-style layer of docs/examples/llama3-layer-d512-s2048.json
// (d = 512, 4 heads of 128, SwiGLU d_ff = 1792, S = 2048, B = 3) at 5.8e12,
// on which, measured on 2 loaded cores (docs/performance.md, "The oracle at
// production shapes"), diagnose takes 10 s of CPU and 2.6 GB and gen
// --config 37 s and 2.3 GB. The count takes every token through the block
// (capacity 1, or dense compute); at that case's 12.5 % the block runs on
// an eighth of them, so a dense case of that work takes several times
// longer. A deviation with no backward pass is bounded by maxFDWork.
const MaxRecomputeWork = 1 << 43

// RecomputeWork is the estimate of the multiply-adds of recomputing a case
// under every deviation: recomputePasses forwards, each
// B·S·(4d² + 2·S·d + m·d·d_ff) per layer (m = 2, or 3 for SwiGLU, times E
// experts in a MoDE layer), plus B·S·d·vocab for a model's head (a MoDE
// case's one deviation, mode_ungated_experts, takes far fewer: its forward
// and a backward of one block pass per expert). The configuration must
// have been validated (spec's size bounds), so that no term overflows a
// float64's exact integers by much.
func RecomputeWork(m *Manifest) float64 {
	fwd, _ := forwardWork(m)
	return fwd * recomputePasses
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
			n = min(n*min(d, MaxCaseElements+1), MaxCaseElements+1) // no overflow: both factors ≤ 2^25+1
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
