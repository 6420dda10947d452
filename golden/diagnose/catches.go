package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// The catches a case claims: the deviations of docs/spec.md §11 that it
// tells apart, computed from its configuration by the deviations' rules
// (ComputedCatches, ModelCatches) or measured by emulating each
// (MeasuredCatches).

// ComputedCatches is catches with the deviations whose effect on a case
// follows from its routed layers' configurations cfgs and whether it has
// padding alone, each added once (golden/torch/audit_catches.py checks
// every claim): weight_mlp_only wherever some layer gathers its whole
// block with a weight other than 1 (docs/spec.md §11; its emulation's skip
// rules), gather_first_k wherever some layer gathers by top-k,
// no_causal_mask wherever some layer gathers its whole block without a
// window, tanh_gate wherever some layer gathers, skipped_scaled wherever
// some layer gathers with a weight defined at a skipped token and not 1,
// aux_over_padding wherever the case is padded and some layer trains
// an auxiliary loss, softmax_whole_row wherever some layer gathers with
// softmax weighting, qk_swapped wherever some layer's attention has as many
// key heads as query heads, weight_scaled (at its α of 0.1) everywhere,
// and router_normed_input wherever some layer's router is linear.
// TestComputedCatchesAreMeasured holds every corpus case's claims of the
// last four to MeasuredCatches.
func ComputedCatches(catches []string, cfgs []spec.Config, padded bool) []string {
	out := slices.Clone(catches)
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, cfg := range cfgs {
		if skipWeightMLPOnly(cfg) == "" && cfg.Weighting != spec.WeightNone {
			add("weight_mlp_only")
		}
		if skipFirstK(cfg) == "" {
			add("gather_first_k")
		}
		if skipNoCausalMask(cfg) == "" {
			add("no_causal_mask")
		}
		if skipTanhGate(cfg) == "" {
			add("tanh_gate")
		}
		if skipSkippedScaled(cfg) == "" {
			add("skipped_scaled")
		}
		if padded && (cfg.Aux != spec.AuxNone && cfg.AuxWeight != 0 || cfg.LoadBalanceWeight != 0) {
			add("aux_over_padding")
		}
		if skipSoftmaxWholeRow(cfg) == "" {
			add("softmax_whole_row")
		}
		if skipQKSwapped(cfg) == "" {
			add("qk_swapped")
		}
		add("weight_scaled")
		if skipRouterNormed(cfg) == "" {
			add("router_normed_input")
		}
	}
	return out
}

// ModelCatches is s's catches with those that follow from its routed
// layers' configurations (ComputedCatches) and shared_router wherever
// two or more routed layers each have a router of their own; a decode case
// tests the decoding, not the forward, and claims only its own.
func ModelCatches(s oracle.ModelSpec) []string {
	if s.Decode {
		return s.Catches
	}
	catches := ComputedCatches(s.Catches, routedConfigs(s.Config), oracle.HasPadding(s.Valid, s.SeqLen))
	if shared, _ := findLayerDeviation("shared_router"); skipModel(s.Config, shared) == "" && !slices.Contains(catches, shared.name) {
		catches = append(catches, shared.name)
	}
	return catches
}

// MeasuredCatches returns the deviations of docs/spec.md §11 that case c
// tells apart: those emulated for it whose recomputed values fail the
// case's own comparison, in the order of Deviations.
func MeasuredCatches(c *format.Case) ([]string, error) {
	if err := checkInputShapes(c); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	switch c.Manifest.Kind {
	case format.KindLayer:
		return measuredLayerCatches(c, nil)
	case format.KindModel:
		return measuredModelCatches(c)
	case format.KindDecode:
		return measuredDecodeCatches(c)
	}
	ems, err := emulate(c, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	var out []string
	for _, em := range ems {
		if em.reason != "" || slices.Contains(out, em.name) {
			continue
		}
		fails, err := failsWhole(c, em)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
		}
		if fails {
			out = append(out, em.name)
		}
	}
	return out, nil
}

// MeasuredLayerCatches is MeasuredCatches of layer case c, whose ref
// forward pass truth the generator has made already, kept for the backward
// pass (ref.LayerForwardGradients or ref.LayerForwardKept at ref's own
// decision, of exactly the case's parameters and inputs): every deviation
// starts from it rather than from ref's forward computed again, which
// gives the same bits. A nil truth is MeasuredCatches.
func MeasuredLayerCatches(c *format.Case, truth *ref.LayerResult) ([]string, error) {
	if c.Manifest.Kind != format.KindLayer {
		return nil, fmt.Errorf("case %s: a %s case, not a layer case", c.Manifest.Name, c.Manifest.Kind)
	}
	if err := checkInputShapes(c); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	var forward *sharedForward
	if truth != nil {
		forward = new(sharedForward)
		forward.once.Do(func() { forward.res = truth })
		forward.keptOnce.Do(func() { forward.kept = truth })
	}
	return measuredLayerCatches(c, forward)
}

// measuredLayerCatches is MeasuredCatches of a layer case, each
// emulation judged as soon as it is computed (emulateLayer's settle) and
// its arrays then dropped: only the verdicts are kept; every deviation
// starts from forward (a sharedForward of their own when nil). The case's
// input shapes must have been checked (checkInputShapes).
func measuredLayerCatches(c *format.Case, forward *sharedForward) ([]string, error) {
	var mu sync.Mutex
	failed := make(map[int]bool)
	settle := func(i int, em emulation, byForward bool) error {
		fails := byForward
		if !fails {
			var err error
			if fails, err = failsWhole(c, em); err != nil {
				return err
			}
		}
		mu.Lock()
		failed[i] = fails
		mu.Unlock()
		return nil
	}
	ems, _, err := emulateLayer(c, nil, nil, true, settle, forward)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return settledCatches(c, ems, func(i int) bool { return failed[i] })
}

// settledCatches lists, in order, the deviations of emulations ems that
// case c tells apart, each emulation settled as it was computed (its
// arrays dropped): failed(i) for one computed, the whole case's
// comparison for one holding the oracle's own arrays (shareEffective), and
// the verdict of the one it repeats for a repeat.
func settledCatches(c *format.Case, ems []emulation, failed func(i int) bool) ([]string, error) {
	var out []string
	for i, em := range ems {
		if em.reason != "" || slices.Contains(out, em.name) {
			continue
		}
		fails := false
		switch {
		case em.arrays != nil: // the oracle's own arrays (shareEffective), not computed
			var err error
			if fails, err = failsWhole(c, em); err != nil {
				return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
			}
		case em.repeats > 0:
			fails = failed(em.repeats - 1)
		default:
			fails = failed(i)
		}
		if fails {
			out = append(out, em.name)
		}
	}
	return out, nil
}

// measuredModelCatches is MeasuredCatches of a model case, as
// measuredLayerCatches is of a layer case: a deviation's gradients are
// computed only where its forward arrays do not already fail the case's
// comparison (modelArraysAnalytic), and each emulation is judged as soon
// as it is computed and its arrays then dropped, so that a model's
// parameter gradients are not held for every deviation at once.
func measuredModelCatches(c *format.Case) ([]string, error) {
	ems, devs, err := modelEmulations(c, nil)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	s := modelSpecOf(c)
	return measuredSettled(c, ems, func(i int) int { return devs[i].cost() }, func(i int, caught *forwardCatch) (map[string]*format.Array, error) {
		devs[i].caught = caught
		return modelArrays(c, s, &devs[i])
	})
}

// measuredDecodeCatches is MeasuredCatches of a decode case: a layer
// deviation is decoded only where its full forward's arrays do not already
// fail the case's comparison, and each emulation, run side by side as
// emulateEach runs them, is judged as soon as it is computed.
func measuredDecodeCatches(c *format.Case) ([]string, error) {
	ems, compute, err := decodeEmulations(c)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return measuredSettled(c, ems, func(int) int { return 1 }, compute)
}

// measuredSettled computes the emulations ems of case c (emulateEach, by
// descending cost), each by compute(i, caught), which sets caught.byForward
// where its forward arrays alone fail the case's comparison and may then
// leave out the rest; each is judged as soon as computed and its arrays
// dropped, and the deviations told apart are listed (settledCatches).
func measuredSettled(c *format.Case, ems []emulation, cost func(i int) int, compute func(i int, caught *forwardCatch) (map[string]*format.Array, error)) ([]string, error) {
	failed := make([]bool, len(ems)) // each written by its own emulation
	settle := func(i int) (map[string]*format.Array, error) {
		caught := new(forwardCatch)
		arrays, err := compute(i, caught)
		if err != nil {
			return nil, err
		}
		if failed[i] = caught.byForward; !failed[i] {
			em := ems[i]
			em.arrays = arrays
			if failed[i], err = failsWhole(c, em); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	if err := emulateEach(c, ems, nil, cost, settle); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Manifest.Name, err)
	}
	return settledCatches(c, ems, func(i int) bool { return failed[i] })
}

// failsWhole reports whether emulation em's arrays, as the whole of a
// candidate, fail case c's comparison.
func failsWhole(c *format.Case, em emulation) (bool, error) {
	dc, err := deviantCase(c, em)
	if err != nil {
		return false, fmt.Errorf("%s: %w", em.name, err)
	}
	res, err := judge.Compare(c, deviantValues(dc), false)
	if err != nil {
		return false, fmt.Errorf("%s: %w", em.name, err)
	}
	return !res.Pass, nil
}

// failsOn reports whether the deviant arrays (expected names; some of the
// case's) fail the case's comparison on the arrays they hold.
func failsOn(c *format.Case, arrays map[string]*format.Array) (bool, error) {
	cand := make(map[string]*format.Array, len(arrays))
	for name, a := range arrays {
		cand[format.CandidateName(name)] = a
	}
	res, err := judge.CompareWith(c, cand, judge.SkipMissing)
	if err != nil {
		return false, err
	}
	return !res.Pass, nil
}

// departsOn reports whether candidate cand is outside tolerance of the
// deviant arrays (expected names; some of the case's) on some array of
// theirs it has: then it departs from the whole emulation too, each array
// judged on its own.
func departsOn(c *format.Case, cand, arrays map[string]*format.Array) (bool, error) {
	dc := &format.Case{Manifest: c.Manifest, Arrays: maps.Clone(c.Arrays)}
	some := make(map[string]*format.Array, len(arrays))
	for name, a := range arrays {
		dc.Arrays[name] = a
		if got, ok := cand[format.CandidateName(name)]; ok {
			some[format.CandidateName(name)] = got
		}
	}
	res, err := judge.CompareWith(dc, some, judge.SkipMissing)
	if err != nil {
		return false, err
	}
	return !res.Pass, nil
}
