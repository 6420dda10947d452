package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
)

// weight_scaled: the router weight scaled by a constant α: every valid
// token's weight (as reported, and as applied) is α·g, so a selected token
// outputs x + α·g·f (Mixture-of-Recursions' 0.1·σ(r) is α = 0.1 on sigmoid
// weighting). α is a parameter: Diagnose fits it to the candidate's arrays
// (fitScale) and judges the candidate against the layer at that α, so that
// it is claimed only where the fitted scale explains every array within
// tolerance. It sets scaled. It applies to every routed layer.
var devWeightScaled = layerDeviation{name: "weight_scaled", scaled: true}

// defaultScale is weight_scaled's α where there is no candidate to fit it
// to (the catches a case claims, DeviantCandidate without a variant): the
// 0.1 of Mixture-of-Recursions' 0.1·σ(r).
const defaultScale = 0.1

// unscaledBand is how near 1 a fitted α may be and still be taken for no
// scale at all: within it weight_scaled is not emulated, so that a
// candidate whose weights are right, or off by another mistake, is never
// told its weight is scaled.
const unscaledBand = 0.01

// alpha is the scale d applies to the router weight: d.scale when fitted
// or given, defaultScale when d has weight_scaled without one, 1 without
// weight_scaled.
func (d *layerDeviation) alpha() float64 {
	switch {
	case !d.scaled:
		return 1
	case d.scale != 0:
		return d.scale
	}
	return defaultScale
}

// scaleWeight applies weight_scaled to an evaluation of the layer: its
// weights and multipliers become α times ref's, and its output base + α·μ·f
// at every token (μ ref's multiplier, 0 where the block did not run). l.res
// becomes a copy, so that ref's result, which the backward pass reads,
// keeps its own weights.
func scaleWeight(l *layerRun, alpha float64) {
	base := l.base()
	res := *l.res
	scale := func(rows [][]float64) [][]float64 {
		out := make([][]float64, len(rows))
		for b, row := range rows {
			out[b] = make([]float64, len(row))
			for i, v := range row {
				out[b][i] = float64(alpha * v)
			}
		}
		return out
	}
	res.Weights, res.Multipliers = scale(res.Weights), scale(res.Multipliers)
	res.Out = weightedOutput(base, res.Multipliers, l.upd)
	l.res, l.out, l.mult = &res, res.Out, res.Multipliers
}

// weightedOutput is base + mult·upd at every token of every row: a
// layer's output with the multipliers mult applied to its update upd.
func weightedOutput(base []*mat.Dense, mult [][]float64, upd []*mat.Dense) []*mat.Dense {
	out := make([]*mat.Dense, len(base))
	for b, x := range base {
		s, dm := x.Dims()
		out[b] = mat.NewDense(s, dm, nil)
		for i := 0; i < s; i++ {
			o, xi, f := out[b].RawRowView(i), x.RawRowView(i), upd[b].RawRowView(i)
			for j := range o {
				o[j] = xi[j] + float64(mult[b][i]*f[j])
			}
		}
	}
	return out
}

// scaleBack is weight_scaled's backward through ref's multipliers and
// weights: dL/dμ = α·dL/d(αμ), and likewise for the weights.
func scaleBack(alpha float64, rows [][]float64) {
	for _, row := range rows {
		for i, v := range row {
			row[i] = float64(alpha * v)
		}
	}
}

// scaleFit accumulates the least-squares fit of α in got ≈ α·want: Σ
// got·want and Σ want².
type scaleFit struct{ gw, ww float64 }

// add accumulates the pairs of got and want, element by element, where
// both are non-zero: a token one of them did not select (a candidate with
// capacity_off_by_one beside the scale drops one) says nothing of α.
func (f *scaleFit) add(got, want []float64) {
	for i, w := range want {
		if got[i] == 0 || w == 0 {
			continue
		}
		f.gw += float64(got[i] * w)
		f.ww += float64(w * w)
	}
}

// fitted is the fit's α, and whether it has any data.
func (f scaleFit) fitted() (float64, bool) { return f.gw / f.ww, f.ww > 0 }

// fitSources are the candidate's arrays of a routed layer weight_scaled's α
// is fitted from, in the order they are preferred: the multipliers and the
// weights, which the scale multiplies; the output's update out − x (a
// layer case's, whose input x the case holds), which it multiplies where
// the block's update is weighted as a whole.
var fitSources = []string{"multipliers", "weights", "out"}

// addFits records into w, by layer prefix and source, the candidate's
// array cand of expected name info.Name and its fit to the case's: the α
// for which α times the case's value is nearest the candidate's.
func addFits(c *format.Case, w map[string]written, info format.ArrayInfo, cand *format.Array) {
	for k, src := range fitSources {
		prefix, ok := cutSuffix(info.Name, src)
		if !ok {
			continue
		}
		f, ok := sourceFit(c, k, c.Arrays[info.Name], cand)
		if !ok {
			return
		}
		lw := w[prefix]
		lw.fits[k], lw.sources[k] = f, cand
		w[prefix] = lw
		return
	}
}

// sourceFit is the fit of the candidate's array cand of source
// fitSources[k] to want, the same array of the case or of an emulation (of
// out, the update out − x, in a layer case); false where the two cannot be
// fitted.
func sourceFit(c *format.Case, k int, want, cand *format.Array) (scaleFit, bool) {
	var f scaleFit
	if want == nil || cand.IsInt() || want.IsInt() || !slices.Equal(cand.Shape, want.Shape) {
		return f, false
	}
	got, exp := cand.F, want.F
	if fitSources[k] == "out" {
		x := c.Arrays["input.x"]
		if c.Manifest.Kind != format.KindLayer || x == nil || !slices.Equal(x.Shape, want.Shape) || c.Manifest.Config.Layer.MLPOnly {
			return f, false
		}
		xs := x.F
		got, exp = slices.Clone(got), slices.Clone(exp)
		for i := range got {
			got[i] -= xs[i]
			exp[i] -= xs[i]
		}
	}
	f.add(got, exp)
	return f, true
}

// cutSuffix is name without the suffix src when name is a layer's expected
// array of that name ("expected.src", "expected.L1.src").
func cutSuffix(name, src string) (string, bool) {
	if len(name) <= len(src) || name[len(name)-len(src):] != src || name[len(name)-len(src)-1] != '.' {
		return "", false
	}
	return name[:len(name)-len(src)], true
}

// fitScale is the α of weight_scaled fitted to what the candidate wrote (w;
// nil without a candidate: defaultScale): from the first routed layer, by
// prefix, that has a source, its first source of fitSources, α = Σ
// got·want / Σ want² over its elements where neither is 0, want the
// oracle's values (w's fits; fitAgainst's, an emulation's). reason says
// why none is fitted: the candidate writes no source, or the fit is not a
// scale (not finite, not positive, or within unscaledBand of 1).
func fitScale(w map[string]written) (alpha float64, reason string) {
	if w == nil {
		return defaultScale, ""
	}
	prefixes := make([]string, 0, len(w))
	for p := range w {
		prefixes = append(prefixes, p)
	}
	slices.Sort(prefixes)
	for _, p := range prefixes {
		for k, src := range fitSources {
			a, ok := w[p].fits[k].fitted()
			if !ok {
				continue
			}
			switch {
			case math.IsNaN(a) || math.IsInf(a, 0) || a <= 0:
				return 0, fmt.Sprintf("the candidate's %s%s fit no positive scale of the unscaled values (α = %.3g)", p, src, a)
			case math.Abs(a-1) <= unscaledBand:
				return 0, fmt.Sprintf("the candidate's %s%s fit α = %.4g, within %g of 1: its weight is not scaled", p, src, a, unscaledBand)
			}
			return a, ""
		}
	}
	return 0, "the candidate writes no multipliers, weights or layer output to fit α to"
}

// fitAgainst is fitScale with the candidate's arrays (w's sources) fitted
// to arrays, the expected arrays of an emulation, in place of the
// oracle's.
func fitAgainst(c *format.Case, w map[string]written, arrays map[string]*format.Array) (alpha float64, reason string) {
	refit := make(map[string]written, len(w))
	for prefix, lw := range w {
		var r written
		for k, src := range fitSources {
			if lw.sources[k] == nil {
				continue
			}
			if f, ok := sourceFit(c, k, arrays[prefix+src], lw.sources[k]); ok {
				r.fits[k] = f
			}
		}
		refit[prefix] = r
	}
	return fitScale(refit)
}

// fitCombined gives each deviation of devs to be emulated on c (a layer or
// model case) that has weight_scaled beside other deviations, and no α
// yet, the α fitted to what its candidate wrote against the forward of the
// others (forwardArrays): the values the scale multiplies where they are
// present (docs/golden-format.md, "A fitted scale"), not the oracle's,
// which another deviation may change (capacity_off_by_one renormalising a
// softmax over k − 1 tokens, router_normed_input's weights of N1(x));
// where none fits, it records the reason.
func fitCombined(c *format.Case, devs []layerDeviation, ems []emulation) error {
	for i := range devs {
		d := &devs[i]
		if !d.scaled || d.scale != 0 || d.written == nil || ems[i].reason != "" {
			continue
		}
		names := slices.DeleteFunc(strings.Split(d.name, "+"), func(n string) bool { return n == devWeightScaled.name })
		if len(names) == 0 {
			continue // weight_scaled alone: fitted to the oracle (withScale)
		}
		rest, ok := combineNames(names)
		if !ok {
			return fmt.Errorf("%s: %s without weight_scaled does not combine", d.name, strings.Join(names, "+"))
		}
		rest.written, rest.torchTopK = d.written, d.torchTopK
		arrays, err := forwardArrays(c, &rest)
		if err != nil {
			return fmt.Errorf("%s: fitting α: %w", d.name, err)
		}
		a, why := fitAgainst(c, d.written, arrays)
		if why != "" {
			ems[i].reason = why
			continue
		}
		d.scale = a
	}
	return nil
}

// forwardArrays are the forward arrays of case c, a layer or model case,
// under d, without gradients.
func forwardArrays(c *format.Case, d *layerDeviation) (map[string]*format.Array, error) {
	if d.swapQK {
		return swapQKArrays(c, d, forwardArrays)
	}
	if c.Manifest.Kind == format.KindLayer {
		_, _, arrays, err := layerForwardOf(c, layerSpecOf(c), d)
		return arrays, err
	}
	_, _, _, arrays, err := modelForwardOf(c, modelSpecOf(c), d)
	return arrays, err
}

// withScale gives each deviation of devs to be emulated that has
// weight_scaled the α fitted to what the candidate wrote (fitScale; its
// written), unless it has one (DeviantCandidate's variant), recording it
// in its emulation, or the reason there is none.
func withScale(devs []layerDeviation, ems []emulation) {
	for i := range devs {
		if !devs[i].scaled || ems[i].reason != "" {
			continue
		}
		if devs[i].scale == 0 {
			a, why := fitScale(devs[i].written)
			if why != "" {
				ems[i].reason = why
				continue
			}
			devs[i].scale = a
		}
		ems[i].scale = devs[i].scale
	}
}

// parseScale reads weight_scaled's α from DeviantCandidate's variant: a
// positive number.
func parseScale(variant string) (float64, error) {
	a, err := strconv.ParseFloat(variant, 64)
	if err != nil || !(a > 0) || math.IsInf(a, 0) {
		return 0, fmt.Errorf("weight_scaled's variant %q is not a positive α", variant)
	}
	return a, nil
}

// ScaleLabel is how a result with weight_scaled reports its fitted α
// (DeviationResult.Scale, Partial.Scale): "router weight scaled by α =
// 0.137".
func ScaleLabel(alpha float64) string { return fmt.Sprintf("router weight scaled by α = %.3g", alpha) }
