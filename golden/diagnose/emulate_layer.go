package diagnose

import (
	"fmt"
	"slices"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// The emulation driver of a layer case: which of the layer deviations the
// case's configuration admits and tells apart from the oracle
// (layerEmulations, shareEffective), and each one's recomputation
// (emulateDeviations, in parallel, cheapest last).

// sharedInLayerCase is why shared_router is not emulated for a layer case.
const sharedInLayerCase = "a layer case has one routed layer (model cases with two or more test it)"

// findLayerDeviation returns the emulation of a deviation name.
func findLayerDeviation(name string) (layerDeviation, bool) {
	for _, d := range layerDeviations() {
		if d.name == name {
			return d, true
		}
	}
	return layerDeviation{}, false
}

// layerSpecOf is the generator's description of a layer case.
func layerSpecOf(c *format.Case) oracle.LayerSpec {
	m := c.Manifest
	cfg := m.Config
	return oracle.LayerSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: *cfg.Layer, Ties: m.Routing.Ties}
}

// emulateLayerCase recomputes a layer case under each deviation, with what
// the candidate wrote (w).
func emulateLayerCase(c *format.Case, w map[string]written, progress func(done, total int)) ([]emulation, error) {
	ems, _, err := emulateLayer(c, w, progress, false, nil, nil)
	return ems, err
}

// settleFunc takes the arrays of emulation i (em, its arrays just
// computed) to a verdict as soon as they are computed, so that they need
// not be held until every emulation is done: at production widths each
// holds the case's parameter gradients (1.7 GB at Llama-3-8B's width).
// byForward is emulateLayer's caught[i].byForward.
type settleFunc func(i int, em emulation, byForward bool) error

// emulateLayer is emulateLayerCase, every deviation starting from ref's
// forward computed once (forward, or its own sharedForward when nil). With measure (MeasuredCatches),
// a deviation's gradients are computed only where its forward arrays do
// not already fail the case's comparison, which tells it apart as surely
// as the whole case would: caught[i].byForward says so, and emulation i
// then holds the forward arrays alone. With settle, each emulation's
// arrays go to settle as soon as computed and are not kept: ems then holds
// none (and an emulation that repeats another shares its verdict, not its
// arrays).
func emulateLayer(c *format.Case, w map[string]written, progress func(done, total int), measure bool, settle settleFunc, forward *sharedForward) (ems []emulation, caught []*forwardCatch, err error) {
	ems, devs, err := layerEmulations(c, w)
	if err != nil {
		return nil, nil, err
	}
	if measure {
		caught = make([]*forwardCatch, len(devs))
		for i := range devs {
			caught[i] = new(forwardCatch)
			devs[i].caught = caught[i]
		}
	}
	byForward := func(i int) bool { return measure && caught[i].byForward }
	err = emulateLayerDeviations(c, devs, ems, progress, settle, forward, byForward)
	return ems, caught, err
}

// emulateLayerDeviations computes the emulations ems of a layer case's
// deviations devs (emulateEach), each from ref's forward of the case
// (forward, or a sharedForward of their own when nil); with settle, each
// emulation's arrays go to settle as soon as computed, byForward(i) its
// third argument.
func emulateLayerDeviations(c *format.Case, devs []layerDeviation, ems []emulation, progress func(done, total int), settle settleFunc, forward *sharedForward, byForward func(i int) bool) error {
	s := layerSpecOf(c)
	if forward == nil {
		forward = new(sharedForward)
	}
	for i := range devs {
		devs[i].forward = forward
	}
	compute := func(i int) (map[string]*format.Array, error) {
		arrays, err := layerArrays(c, s, &devs[i])
		if err != nil || settle == nil {
			return arrays, err
		}
		em := ems[i]
		em.arrays = arrays
		return nil, settle(i, em, byForward(i))
	}
	err := emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, compute)
	shareArrays(ems)
	return err
}

// layerEmulations lists the emulations of a layer case and their
// deviations, each with the reason it is not emulated, or the arrays it
// shares (shareEffective), or neither: to be computed.
func layerEmulations(c *format.Case, w map[string]written) ([]emulation, []layerDeviation, error) {
	if c.Manifest.Config.Layer == nil {
		return nil, nil, fmt.Errorf("layer case without a layer configuration")
	}
	s := layerSpecOf(c)
	if err := s.Config.Validate(); err != nil {
		return nil, nil, err
	}
	var ems []emulation
	devs := make([]layerDeviation, len(format.Deviations))
	for i, dev := range format.Deviations {
		ld, ok := findLayerDeviation(dev.Name)
		switch {
		case isMoDEDeviation(dev.Name):
			ems = append(ems, notEmulated(dev.Name, "a layer case has no experts (mode cases test it)"))
		case !ok:
			ems = append(ems, notEmulated(dev.Name, "a layer case has no incremental decoding (decode cases test it)"))
		case ld.sharedRouter:
			ems = append(ems, notEmulated(dev.Name, sharedInLayerCase))
		case ld.skip != nil && ld.skip(s.Config) != "":
			ems = append(ems, notEmulated(dev.Name, ld.skip(s.Config)))
		default:
			ems = append(ems, emulation{name: dev.Name})
		}
		ld.written = w
		devs[i] = ld
	}
	if !w["expected."].showsOrder(c) {
		ems, devs = withTorchTopK(ems, devs)
	}
	refuseFD(c, devs, ems)
	withScale(devs, ems)
	if err := shareEffective(c, devs, ems, []spec.Config{s.Config}); err != nil {
		return nil, nil, err
	}
	return ems, devs, nil
}

// shareEffective finds the deviations that compute exactly what another
// one, or the oracle, computes on this case, so that each computation is
// made once: a capacity rule whose k equals the exact rule's, or the
// off-by-one's, in every row of every routed layer (configurations cfgs)
// is that rule, other targets change nothing in a model case whose
// layers train no auxiliary loss, and the weight on the MLP's update alone
// is the weight on the whole update where every layer's g is 1. An emulation that is the oracle gets the case's own
// expected arrays; one that repeats an earlier one records it in
// ems[i].repeats, and shareArrays copies the arrays after the computation.
func shareEffective(c *format.Case, devs []layerDeviation, ems []emulation, cfgs []spec.Config) error {
	first := map[string]int{}
	for i := range ems {
		if ems[i].reason != "" {
			continue
		}
		d := devs[i]
		if d.capacity == capacityPlainFloor {
			same, err := sameCapacities(c, cfgs, capacityPlainFloor, capacityExact)
			if err != nil {
				return err
			}
			off, err := sameCapacities(c, cfgs, capacityPlainFloor, capacityOffByOne)
			if err != nil {
				return err
			}
			off = off && noTieAtKth(c)
			switch {
			case same:
				d.capacity = capacityExact
			case off:
				d.capacity = capacityOffByOne
			}
		}
		if d.weightMLPOnly && !weighted(cfgs) {
			// g = 1: x + a + g·m is x + g·(a + m).
			d.weightMLPOnly = false
		}
		if d.targetsFirstRow && c.Manifest.Kind == format.KindModel && !auxReadsTargets(cfgs) {
			// A model case reports no targets, and no layer's loss reads them.
			d.targetsFirstRow = false
		}
		if d.auxOverPadding && !padded(c) {
			// Without padding every position counts in the losses already.
			d.auxOverPadding = false
		}
		if d.capacity == capacityExact && !d.gathered() && !d.targetsFirstRow && d.feed == feedFrozenInput && d.output == nil && !d.sharedRouter &&
			!d.tanhGate && !d.rowSoftmax && !d.scaleSkipped && !d.auxOverPadding && !d.swapQK && !d.scaled && !d.routerNormed {
			ems[i].arrays = expectedArrays(c)
			continue
		}
		key := fmt.Sprintf("%d %t %t %t %t %t %t %t %t %t %t %t %t %t %t %g %t %d %p", d.capacity, d.scoreOrder, d.windowByIndex, d.ropeAtIndex, d.noCausalMask, d.targetsFirstRow, d.weightMLPOnly, d.firstK, d.torchTopK, d.sharedRouter,
			d.tanhGate, d.rowSoftmax, d.scaleSkipped, d.auxOverPadding, d.swapQK, d.alpha(), d.routerNormed, d.feed, d.output)
		if j, ok := first[key]; ok {
			ems[i].repeats = j + 1
			ems[i].arrays = map[string]*format.Array{} // not computed; shareArrays fills it
			continue
		}
		first[key] = i
	}
	return nil
}

// noTieAtKth reports whether c is a layer case in each of whose rows the
// k-th largest router weight is tied with no other, so that the strict
// rule of capacity_off_by_one selects exactly the top k − 1. (In a model
// case a deviation changes the router weights of the layers after the
// first, so nothing is known before they are computed.)
func noTieAtKth(c *format.Case) bool {
	cfg := c.Manifest.Config
	r, ok := c.Arrays["expected.router_logits"]
	if c.Manifest.Kind != format.KindLayer || cfg.Layer == nil || !ok || len(r.Shape) != 2 {
		return false
	}
	k, err := ref.RowCapacities(cfg.Layer.Capacity, cfg.Batch, cfg.SeqLen, cfg.ValidLengths)
	if err != nil {
		return false
	}
	for b, n := range aboveKth(oracle.Field(r), k, cfg.ValidLengths) {
		if n != max(k[b]-1, 0) {
			return false
		}
	}
	return true
}

// padded reports whether some row of the case has a padded position.
func padded(c *format.Case) bool {
	return oracle.HasPadding(c.Manifest.Config.ValidLengths, c.Manifest.Config.SeqLen)
}

// weighted reports whether some layer's output weight g is not 1.
func weighted(cfgs []spec.Config) bool {
	for _, cfg := range cfgs {
		if cfg.Weighting != spec.WeightNone {
			return true
		}
	}
	return false
}

// auxReadsTargets reports whether some layer's loss reads the auxiliary
// targets: an auxiliary loss with a weight other than 0.
func auxReadsTargets(cfgs []spec.Config) bool {
	for _, cfg := range cfgs {
		if cfg.Aux != spec.AuxNone && cfg.AuxWeight != 0 {
			return true
		}
	}
	return false
}

// sameCapacities reports whether capacity rules a and b give the same k in
// every row of every configuration.
func sameCapacities(c *format.Case, cfgs []spec.Config, a, b capacityRule) (bool, error) {
	m := c.Manifest.Config
	for _, cfg := range cfgs {
		ka, err := (&layerDeviation{capacity: a}).rowCapacities(cfg.Capacity, m.Batch, m.SeqLen, m.ValidLengths)
		if err != nil {
			return false, err
		}
		kb, err := (&layerDeviation{capacity: b}).rowCapacities(cfg.Capacity, m.Batch, m.SeqLen, m.ValidLengths)
		if err != nil {
			return false, err
		}
		if !slices.Equal(ka, kb) {
			return false, nil
		}
	}
	return true, nil
}

// shareArrays gives each emulation that repeats another the other's
// arrays.
func shareArrays(ems []emulation) {
	for i := range ems {
		if ems[i].repeats > 0 {
			ems[i].arrays = ems[ems[i].repeats-1].arrays
		}
	}
}

// expectedArrays is the case's own expected arrays.
func expectedArrays(c *format.Case) map[string]*format.Array {
	arrays := make(map[string]*format.Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			arrays[info.Name] = c.Arrays[info.Name]
		}
	}
	return arrays
}

// emulateDeviations fills ems[i] with the case recomputed under devs[i]
// (a layer or model case), or the reason it cannot be.
func emulateDeviations(c *format.Case, devs []layerDeviation, ems []emulation, progress func(done, total int)) error {
	return emulateSettled(c, devs, ems, progress, nil, nil)
}

// emulateSettled is emulateDeviations; in a layer case the deviations
// start from ref's forward of the case computed once (forward, or a
// sharedForward of their own when nil), and with settle each emulation's
// arrays go to settle as soon as computed and are not kept (emulateLayer's
// settle; byForward is the deviation's caught.byForward, false without
// caught).
func emulateSettled(c *format.Case, devs []layerDeviation, ems []emulation, progress func(done, total int), settle settleFunc, forward *sharedForward) error {
	switch c.Manifest.Kind {
	case format.KindLayer:
		s := layerSpecOf(c)
		for i, d := range devs {
			switch {
			case d.sharedRouter:
				ems[i].reason = sharedInLayerCase
			case d.skip != nil:
				ems[i].reason = d.skip(s.Config)
			}
		}
		refuseFD(c, devs, ems)
		if err := fitCombined(c, devs, ems); err != nil {
			return err
		}
		withScale(devs, ems)
		if err := shareEffective(c, devs, ems, []spec.Config{s.Config}); err != nil {
			return err
		}
		return emulateLayerDeviations(c, devs, ems, progress, settle, forward, func(i int) bool { return devs[i].caught != nil && devs[i].caught.byForward })
	case format.KindModel:
		s := modelSpecOf(c)
		for i, d := range devs {
			ems[i].reason = skipModel(s.Config, d)
		}
		refuseFD(c, devs, ems)
		if err := fitCombined(c, devs, ems); err != nil {
			return err
		}
		withScale(devs, ems)
		if err := shareEffective(c, devs, ems, routedConfigs(s.Config)); err != nil {
			return err
		}
		err := emulateEach(c, ems, progress, func(i int) int { return devs[i].cost() }, func(i int) (map[string]*format.Array, error) { return modelArrays(c, s, &devs[i]) })
		shareArrays(ems)
		return err
	case format.KindDecode:
		return emulateDecodeDeviations(c, devs, ems, progress)
	}
	return fmt.Errorf("kind %q has no combined emulation", c.Manifest.Kind)
}
