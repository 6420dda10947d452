package diagnose

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// The layer deviations a decode case can show: a port makes the same
// mistake in its full forward and in its decoder, so a decode case judges
// both under the deviation (decodeDeviantArrays): the forward by the
// model's emulation (runModel), the decoding by ref's decoder with the
// deviation's gate, update formula, skipped-token scaling, shared router,
// router reading N1(x) (router_normed_input, as golden/torch/mod_torch.py's
// decoder does) or exchanged queries and keys (step, decodeUpdate), and
// where the deviation counts positions in gathered indices, the decoder
// counting them in cache slots (window_gathered_indices,
// rope_gathered_indices). A decode_mismatch
// variant combines with them (combineDecode): the combination search runs
// on decode cases as on layer and model cases.

// decodeSkip says why layer deviation d is not emulated on a decode case
// of configuration cfg, or returns "": the deviations whose every effect
// step decodes (decodable), where skipModel finds no reason against them.
func decodeSkip(cfg spec.ModelConfig, d layerDeviation) string {
	if why := decodable(d); why != "" {
		return why
	}
	return skipModel(cfg, d)
}

// decodable says why the decoder cannot have deviation d, or returns "".
// A capacity rule, the auxiliary targets, the predictor's input and the
// losses over padding change no array a decode case holds (its routing is
// causal, by the sign); the other orders of the gathered tokens, a fitted
// scale and a softmax over the row have no decoding here.
func decodable(d layerDeviation) string {
	switch {
	case d.capacity != capacityExact || d.targetsFirstRow || d.feed != feedFrozenInput || d.auxOverPadding:
		return "a decode case routes causally and holds no auxiliary targets or losses: the deviation changes none of its arrays"
	case d.scoreOrder || d.firstK || d.rowSoftmax || d.scaled || d.output != nil && d.outputForm() == "ste_m_plus_1":
		return "a decode case routes causally, one token at a time: the deviation has no decoding here (layer and model cases test it)"
	}
	return ""
}

// changesUpdate reports whether d (nil for none) changes how a decoded
// token's update is added: decodeUpdate's formula is not x + g·f.
func (d *layerDeviation) changesUpdate() bool {
	return d != nil && (d.output != nil || d.weightMLPOnly)
}

// decodeUpdate adds a routed token's update to its residual stream x in
// place under d's formula, as the layer's emulation writes it (write,
// residualTwice, residualScaled, noWeighting): the attention's update a
// and the MLP's m (a nil under MLP-only routing, whose x has the
// attention's update already), weight g.
func (d *layerDeviation) decodeUpdate(x, a, m []float64, g float64) {
	for j := range x {
		aj := 0.0
		if a != nil {
			aj = a[j]
		}
		f := aj + m[j]
		switch form := d.outputForm(); {
		case form == "residual_twice" && d.weightMLPOnly:
			x[j] += x[j] + aj + float64(g*m[j])
		case form == "residual_twice":
			x[j] += float64(g * (x[j] + f))
		case form == "residual_scaled":
			x[j] = float64(g * (x[j] + f))
		case form == "no_weighting":
			x[j] += f
		case d.weightMLPOnly:
			x[j] += aj + float64(g*m[j])
		default:
			x[j] += float64(g * f)
		}
	}
}

// scaleRow multiplies x by g in place: a skipped token under skipped_scaled.
func scaleRow(x []float64, g float64) {
	for j := range x {
		x[j] = float64(g * x[j])
	}
}

// decodeDeviantArrays is a decode case's expected arrays for a model whose
// routed layers have deviation d in the full forward and in decoding, the
// decoder with d's decode_mismatch fault (d.decodeFault): every block's Wq
// and Wk exchanged (swapQKArrays), every routed layer's router the first's
// (shared_router), and the window or RoPE the deviation counts in gathered
// indices counted, decoding, in cache slots.
func decodeDeviantArrays(c *format.Case, s oracle.ModelSpec, d layerDeviation) (map[string]*format.Array, error) {
	if d.swapQK {
		return swapQKArrays(c, &d, func(c *format.Case, d *layerDeviation) (map[string]*format.Array, error) {
			return decodeDeviantArrays(c, s, *d)
		})
	}
	p, in, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	if d.sharedRouter {
		p = sharedRouterParams(s.Config, p)
		d.sharedRouter = false
	}
	arrays, err := decodeForwardArrays(c, s, p, in, d)
	if err != nil {
		return nil, err
	}
	if d.caught != nil {
		if d.caught.byForward, err = failsOn(c, arrays); err != nil || d.caught.byForward {
			return arrays, err
		}
	}
	v := d.decodeFault
	v.windowSlots = v.windowSlots || d.windowByIndex
	v.slotPositions = v.slotPositions || d.ropeAtIndex
	return decodeArraysUnder(c, s, p, in, v, &d, arrays, d.caught)
}

// sharedRouterParams is p with every routed layer's router the first
// routed layer's (shared_router).
func sharedRouterParams(cfg spec.ModelConfig, p *ref.ModelParams) *ref.ModelParams {
	shared := *p
	shared.Layers = slices.Clone(p.Layers)
	var first *ref.LayerParams
	for l, ml := range cfg.Layers {
		if !ml.Routed {
			continue
		}
		if first == nil {
			first = p.Layers[l]
			continue
		}
		own := *p.Layers[l]
		own.Router, own.RouterBias = first.Router, first.RouterBias
		shared.Layers[l] = &own
	}
	return &shared
}

// combineDecode is combineNames for a decode case: decode_mismatch among
// names is the decoder's fault variant (a decodeVariant's name), the other
// names the layer deviation, which must be decodable; ok is false
// otherwise, and for skipped tokens cached beside a deviation that feeds
// routed ones at their cache slots.
func combineDecode(names []string, variant string) (layerDeviation, bool) {
	layer := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "decode_mismatch" })
	var d layerDeviation
	if len(layer) > 0 {
		var ok bool
		if d, ok = combineNames(layer); !ok || decodable(d) != "" {
			return d, false
		}
	}
	if len(layer) < len(names) {
		i := slices.IndexFunc(decodeVariants(), func(v decodeVariant) bool { return v.name == variant })
		if i < 0 || len(names)-len(layer) > 1 {
			return d, false
		}
		d.decodeFault = decodeVariants()[i]
	} else if variant != "" {
		return d, false
	}
	if d.decodeFault.cacheSkipped && (d.decodeFault.slotPositions || d.decodeFault.windowSlots || d.ropeAtIndex || d.windowByIndex) {
		return d, false // a skipped token cached at its position, a routed one fed at its slot: the cache's positions would not ascend
	}
	d.name = strings.Join(names, "+")
	return d, true
}

// emulateDecodeDeviations fills ems[i] with a decode case recomputed under
// devs[i] (combineDecode's), or the reason it cannot be.
func emulateDecodeDeviations(c *format.Case, devs []layerDeviation, ems []emulation, progress func(done, total int)) error {
	s := modelSpecOf(c)
	for i, d := range devs {
		if why := skipModel(s.Config, d); why != "" {
			ems[i].reason = why
		} else if d.decodeFault.windowSlots && !hasRoutedWindow(s.Config) {
			ems[i].reason = "no routed layer attends through a window"
		}
	}
	return emulateEach(c, ems, progress, func(int) int { return 1 }, func(i int) (map[string]*format.Array, error) {
		arrays, err := decodeDeviantArrays(c, s, devs[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", devs[i].name, err)
		}
		return arrays, nil
	})
}
