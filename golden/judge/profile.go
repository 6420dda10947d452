package judge

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
)

// flipMarginTols is the near-tie margin in units of the router logits'
// tolerance: two router weights each within the tolerance of the truth can
// swap order when they are within twice of each other.
const flipMarginTols = 2

// BaselineError is the emulated implementation's error on one array and
// the tolerance the profile derives from it.
type BaselineError struct {
	// Array is the candidate's name of the array.
	Array string `json:"array"`
	// Err is the emulation's largest |baseline − expected| over the judged
	// elements (for the decoded logits, at least the logits' own: the
	// same values computed token by token; for a scalar, at least the
	// case's largest relative error of a forward array times its scale).
	Err       float64          `json:"err"`
	Tolerance format.Tolerance `json:"tolerance"`
}

// truthAtDecisions returns the truth the baseline's errors are measured
// against: the case itself, or, when the emulation routed some decision
// otherwise (a near-tie its precision cannot resolve; an expert's choice
// too), the truth
// recomputed with the emulation's decisions frozen (as JudgeFlips does for
// a candidate), so that the errors measure the rounding and not the flip.
func truthAtDecisions(c *format.Case, baseline map[string]*format.Array) (*format.Case, error) {
	for _, info := range c.Manifest.Arrays {
		_, kind := routingArray(info.Name)
		b, ok := baseline[format.CandidateName(info.Name)]
		if kind == "" && !strings.HasSuffix(info.Name, "expert_choice") || info.Role != format.RoleExpected || !ok {
			continue
		}
		w := c.Arrays[info.Name]
		if slices.Equal(b.I, w.I) && slices.Equal(b.F, w.F) {
			continue
		}
		return frozenTruth(c, baseline)
	}
	return c, nil
}

// ProfileReport is what a profile measured on one case.
type ProfileReport struct {
	// Margin is the near-tie margin the case was judged with.
	Margin float64         `json:"margin"`
	Arrays []BaselineError `json:"arrays"`
}

// Tolerances returns a copy of c judged under profile p: every expected
// float array's tolerance is Multiple × the family's largest error plus
// FloorUnits × Unit × its scale (profileScale), absolute (rtol 0, as
// FlashAttention's rule), and the near-tie margin of the routing is
// flipMarginTols times the router scores' tolerance (the largest over the
// routed layers). family holds the arrays each emulated implementation of
// the profile computed on c (mod/modcase.EmulateFamily), under candidate
// names; an array's error is the largest over the members. Integer arrays
// stay exact. The measurements are returned in the case's array order,
// with the margin.
func Tolerances(p format.Profile, c *format.Case, family ...map[string]*format.Array) (*format.Case, *ProfileReport, error) {
	if p.IsZero() {
		return c, nil, nil
	}
	var fe FamilyErrors
	for _, baseline := range family {
		if err := fe.Add(p, c, baseline); err != nil {
			return nil, nil, err
		}
	}
	return fe.Tolerances(p, c)
}

// FamilyErrors is a family's largest error on each expected float array
// of a case over the members added so far: the reduction Tolerances
// makes, for a family computed a member at a time whose members' arrays
// need not be held together. The zero value has no member.
type FamilyErrors struct {
	members int
	// errs is the largest error of each array, by candidate name.
	errs map[string]float64
}

// Add measures one emulated implementation's arrays (baseline, under
// candidate names) on c under profile p and keeps, for each array, the
// larger of its error and the errors added before.
func (fe *FamilyErrors) Add(p format.Profile, c *format.Case, baseline map[string]*format.Array) error {
	e, err := memberErrors(p, c, baseline)
	if err != nil {
		return err
	}
	if fe.errs == nil {
		fe.errs = map[string]float64{}
	}
	for name, v := range e {
		fe.errs[name] = math.Max(fe.errs[name], v)
	}
	fe.members++
	return nil
}

// Tolerances is Tolerances of the family whose errors fe holds: a copy of
// c judged under profile p.
func (fe *FamilyErrors) Tolerances(p format.Profile, c *format.Case) (*format.Case, *ProfileReport, error) {
	if p.IsZero() {
		return c, nil, nil
	}
	if fe.members == 0 {
		return nil, nil, fmt.Errorf("precision %s: no emulated implementation to measure", p.Name)
	}
	m := *c.Manifest
	m.Arrays = slices.Clone(m.Arrays)
	var out []BaselineError
	errs := maps.Clone(fe.errs) // not nil: a member was added
	if e, ok := errs["decode_logits"]; ok {
		errs["decode_logits"] = math.Max(e, errs["logits"])
	}
	// A scalar (a loss, an auxiliary term) is a reduction of the case's
	// arrays, and one evaluation of its error is one draw that may cancel:
	// its baseline error is at least the largest relative error of the
	// case's forward arrays times its own scale.
	rel := 0.0
	for _, info := range m.Arrays {
		name := format.CandidateName(info.Name)
		// An array that is 0 wherever judged (every row padded) has no
		// relative error to lend.
		if e, ok := errs[name]; ok && format.Elements(info.Shape) > 1 && !strings.HasPrefix(name, "grad.") {
			if s := profileScale(p, c, info.Name); s > 0 {
				rel = math.Max(rel, e/s)
			}
		}
	}
	for _, info := range m.Arrays {
		name := format.CandidateName(info.Name)
		if e, ok := errs[name]; ok && format.Elements(info.Shape) == 1 && !strings.HasPrefix(name, "grad.") {
			errs[name] = math.Max(e, rel*profileScale(p, c, info.Name))
		}
	}
	mags, err := oracle.GradientMagnitudes(c)
	if err != nil {
		return nil, nil, fmt.Errorf("precision %s: %w", p.Name, err)
	}
	margin := 0.0
	for i, info := range m.Arrays {
		name := format.CandidateName(info.Name)
		e, ok := errs[name]
		if !ok {
			continue
		}
		scale := profileScale(p, c, info.Name)
		of := ""
		if mg := mags[name]; mg != nil && scale < p.Unit*maxAbs(mg.F) {
			// Zero by cancellation as far as the format can tell: its
			// truth is below one unit of what its terms add up to, and a
			// correct implementation's value is the round-off of what
			// cancelled.
			scale, of = maxAbs(mg.F), fmt.Sprintf(", the scale of the terms it sums, its truth %.3g being below one unit of it (docs/tolerances.md, \"The scale of what cancelled\")", scale)
		}
		abs := p.AbsUnit()
		tol := format.Tolerance{
			ATol: float64(format.Multiple*e) + float64(p.FloorUnits()*(float64(p.Unit*scale)+abs)),
			Reason: fmt.Sprintf("precision %s: %d × the largest error %.3g of a family of emulated %s implementations (docs/tolerances.md, \"Precision profiles\") + %g × (unit %.3g × the scale %.3g%s + %.3g)",
				p.Name, format.Multiple, e, p.Name, p.FloorUnits(), p.Unit, scale, of, abs),
		}
		m.Arrays[i].Tolerance = &tol
		out = append(out, BaselineError{Array: name, Err: e, Tolerance: tol})
		if strings.HasSuffix(name, "router_logits") || strings.HasSuffix(name, "predictor_logits") {
			margin = math.Max(margin, flipMarginTols*tol.ATol)
		}
	}
	if p.Unit >= 0x1p-24 {
		// Never below the float32 margin of the manifest at float32 or
		// lower precision; the float64 profile's is its own.
		margin = math.Max(margin, c.Manifest.Routing.Margin)
	}
	m.Routing.Margin = margin
	countNearTies(c, &m, out)
	return &format.Case{Manifest: &m, Arrays: c.Arrays}, &ProfileReport{Margin: margin, Arrays: out}, nil
}

// countNearTies widens the tolerance of a predictor's accuracy, a count
// of the tokens whose predictor logit has the sign of their target, to
// the fraction of judged tokens whose truth logit lies within twice the
// predictor logits' tolerance of 0: a correct implementation may give any
// of those the other sign (a discrete count, as a routing decision at a
// near-tie). out, the report, is updated with m.
func countNearTies(c *format.Case, m *format.Manifest, out []BaselineError) {
	for i, info := range m.Arrays {
		if !strings.HasSuffix(info.Name, "predictor_accuracy") || info.Tolerance == nil {
			continue
		}
		logits := strings.TrimSuffix(info.Name, "accuracy") + "logits"
		q := c.Arrays[logits]
		var qtol float64
		for _, l := range m.Arrays {
			if l.Name == logits && l.Tolerance != nil {
				qtol = l.Tolerance.ATol
			}
		}
		if q == nil || qtol == 0 {
			continue
		}
		near, count := 0, 0
		for k, v := range q.F {
			if judged(c, q.Shape, k) {
				count++
				if math.Abs(v) <= flipMarginTols*qtol {
					near++
				}
			}
		}
		if near == 0 || count == 0 || float64(near)/float64(count) <= info.Tolerance.ATol {
			continue
		}
		tol := *info.Tolerance
		tol.ATol = float64(near) / float64(count)
		tol.Reason += fmt.Sprintf("; widened to %d of its %d tokens, whose predictor logits lie within %.3g of 0, where a correct implementation may give them the other sign", near, count, flipMarginTols*qtol)
		m.Arrays[i].Tolerance = &tol
		for j := range out {
			if format.CandidateName(info.Name) == out[j].Array {
				out[j].Tolerance = tol
			}
		}
	}
}

// memberErrors returns one emulated implementation's largest error on
// each expected float array of c, against the truth at its own decisions
// (truthAtDecisions).
func memberErrors(p format.Profile, c *format.Case, baseline map[string]*format.Array) (map[string]float64, error) {
	truth, err := truthAtDecisions(c, baseline)
	if err != nil {
		return nil, fmt.Errorf("precision %s: %w", p.Name, err)
	}
	errs := map[string]float64{}
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected || info.DType == "<i8" || strings.HasSuffix(info.Name, ".targets") {
			continue
		}
		name := format.CandidateName(info.Name)
		b, ok := baseline[name]
		want := truth.Arrays[info.Name]
		if !ok || b.F == nil || len(b.F) != len(want.F) {
			return nil, fmt.Errorf("precision %s: the emulated implementation did not compute %q", p.Name, name)
		}
		worst := 0.0
		run, keep := judgedRuns(c, want.Shape) // judged, a run at a time
		for k0 := 0; k0 < len(want.F); k0 += run {
			if !keep(k0 / run) {
				continue
			}
			for k := k0; k < min(k0+run, len(want.F)); k++ {
				d := math.Abs(b.F[k] - want.F[k])
				if math.IsNaN(d) || math.IsInf(d, 0) {
					return nil, fmt.Errorf("precision %s: the emulated implementation gives %v for %s at %v (overflow of the format?)", p.Name, b.F[k], name, want.Index(k))
				}
				worst = max(worst, d) // d is neither NaN nor −0: math.Max's result
			}
		}
		errs[name] = worst
	}
	return errs, nil
}

// profileScale is the scale of an expected array that the floor is a
// number of roundings of: ‖e‖∞, except for the loss of a layer or MoDE
// case, Σ upstream.out ⊙ out (+ aux.total), a sum of B·S·d terms that a
// low-precision implementation holds each to a rounding or so: its scale
// is then two roundings' share of the norm ‖upstream.out ⊙ out‖₂ of its
// terms (independent roundings add as a random walk; docs/tolerances.md),
// when that is larger. A single sum is one draw of its error, which the emulation may
// happen to get nearly right (it did, by 70 times, on layer-log-capacity).
func profileScale(p format.Profile, c *format.Case, name string) float64 {
	scale := 0.0
	for _, v := range c.Arrays[name].F {
		scale = math.Max(scale, math.Abs(v))
	}
	u, out := c.Arrays["upstream.out"], c.Arrays["expected.out"]
	if name != "expected.loss" || u == nil || out == nil || len(u.F) != len(out.F) {
		return scale
	}
	ss := 0.0
	for k, x := range u.F {
		if judged(c, u.Shape, k) {
			t := x * out.F[k]
			ss += float64(t * t)
		}
	}
	// Two roundings of the terms' norm: each term rounded by at most a
	// unit, a random walk of σ ≈ 0.29·unit·‖t‖₂, and the out's own error
	// beside it; the family's members (float32 sums, random rounding)
	// measure the rest. With one, PyTorch in emulated fp16 came to 1.04
	// of layer-gqa's loss tolerance.
	return math.Max(scale, 2*math.Sqrt(ss)/p.FloorUnits())
}

// maxAbs is ‖v‖∞.
func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}
