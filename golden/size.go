package golden

import (
	"fmt"
	"strings"

	"github.com/modref/modref/spec"
)

// maxRecomputeWork bounds recomputeWork, and so the time and memory a case
// makes modref spend before it compares anything: check's self-check runs
// the case through mod, diagnose recomputes it under each deviation with
// finite-difference gradients. 2^31 multiply-adds: the slowest committed
// case, layer-capacity-floor, needs 1.8e9 (diagnose takes 8-9 s of CPU on
// it, docs/performance.md, "The oracle"); the next, model-every-third,
// 3.1e8. A manifest within its arrays' bound (maxCaseElements) but with a
// wide d_ff or many tokens asks for far more.
const maxRecomputeWork = 1 << 31

// recomputeWork is the estimate of the multiply-adds of recomputing a case
// with finite-difference gradients: (1 + 2·n) forwards for the n
// coordinates differentiated (the parameters, and for a layer-level case
// the input), each forward B·S·(4d² + 2·S·d + m·d·d_ff) per layer (m = 2,
// or 3 for SwiGLU, times E experts in a MoDE layer), plus B·S·d·vocab for
// a model's head. The configuration must have been validated (spec's size
// bounds), so that no term overflows a float64's exact integers by much.
func recomputeWork(m *Manifest) float64 {
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
	var fwd, coords float64
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
	return fwd * (1 + float64(2*coords))
}

// paramCount is the number of parameter values a validated manifest's
// configuration has.
func paramCount(m *Manifest) int64 {
	switch m.Kind {
	case KindLayer:
		return m.Config.Layer.ParamCount()
	case KindMoDE:
		return m.Config.MoDE.ParamCount()
	}
	return m.Config.ModelConfig().ParamCount()
}

// checkBounds checks what a validated manifest asks a reader to allocate
// and compute, before its arrays are read, and returns the number of
// values of each array it lists: the arrays together hold at most
// maxCaseElements values, the configuration's parameters are exactly those
// its param.* arrays hold (so that a d_model or d_ff far above the arrays
// is refused), and recomputing the case takes at most maxRecomputeWork.
func (m *Manifest) checkBounds() (map[string]int, error) {
	counts := make(map[string]int, len(m.Arrays))
	total := 0
	for _, info := range m.Arrays {
		n := 1
		for _, d := range info.Shape {
			n = min(n*min(d, maxCaseElements+1), maxCaseElements+1) // no overflow: both factors ≤ 2^22+1
		}
		if total += n; n > maxCaseElements || total > maxCaseElements {
			return nil, fmt.Errorf("%w: the arrays it lists hold more than %d values together", ErrTooLarge, maxCaseElements)
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
// maxCaseElements), and against maxRecomputeWork.
func (m *Manifest) checkConfigSizes(counts map[string]int) error {
	var listed int64
	for name, n := range counts {
		if strings.HasPrefix(name, "param.") {
			listed += int64(n)
		}
	}
	if want := paramCount(m); want != listed {
		return fmt.Errorf("%w: the configuration has %d parameter values, its param.* arrays hold %d", ErrManifestArrays, want, listed)
	}
	if w := recomputeWork(m); w > maxRecomputeWork {
		return fmt.Errorf("%w: recomputing the case would take about %.3g multiply-adds, more than the %d accepted (batch %d, seq_len %d, the configuration's sizes)",
			ErrTooLarge, w, int64(maxRecomputeWork), m.Config.Batch, m.Config.SeqLen)
	}
	return nil
}
