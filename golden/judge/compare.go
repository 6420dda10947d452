package judge

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/spec"
)

// Status of one array's comparison.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusMissing = "missing"
)

// ArrayResult is the verdict on one array of a candidate.
type ArrayResult struct {
	// Name is the candidate's array name: the manifest's name without the
	// "expected." prefix.
	Name   string `json:"name"`
	Status string `json:"status"`
	// MaxAbs is the largest |candidate − expected| over the judged elements;
	// MaxRel the largest |candidate − expected| / |expected| over elements
	// with |expected| ≥ atol (0 when there are none).
	MaxAbs float64 `json:"max_abs"`
	MaxRel float64 `json:"max_rel"`
	// Where is the index of the element furthest outside (or closest to
	// leaving) the tolerance, with the two values there.
	Where     []int            `json:"where"`
	Got       float64          `json:"got"`
	Want      float64          `json:"want"`
	Tolerance format.Tolerance `json:"tolerance"`
	// Routing explains a mismatch of selected positions.
	Routing []RowMismatch `json:"routing,omitempty"`
}

// RowMismatch is a routing difference in one batch row of one layer.
type RowMismatch struct {
	Row int `json:"row"`
	// OnlyCandidate lists positions the candidate routed and the oracle did
	// not; OnlyOracle the other way round.
	OnlyCandidate []int `json:"only_candidate"`
	OnlyOracle    []int `json:"only_oracle"`
	// Candidate and Oracle are how many tokens of the row each routed;
	// RoutesAll says the candidate routed every valid token of the row and
	// the oracle did not (routing not applied).
	Candidate int  `json:"candidate"`
	Oracle    int  `json:"oracle"`
	RoutesAll bool `json:"routes_all"`
	// Causal says the layer routes by the sign of a score (docs/spec.md §9)
	// rather than by top-k.
	Causal bool `json:"causal"`
	// Gap is the smallest difference, in the oracle's router weights (or,
	// under causal routing, the distance of a causal score from 0), that
	// the flip crossed. Tie says it is exactly 0: the scores are exactly
	// tied (or a causal score is exactly 0), so the tie rule decides and the
	// candidate broke it. NearTie says it is within the case's near-tie
	// margin but not 0, where two correct float32 implementations may
	// disagree.
	Gap     float64 `json:"gap"`
	Tie     bool    `json:"tie"`
	NearTie bool    `json:"near_tie"`
	// Order says the candidate selected the same positions as the oracle
	// but listed them in another order (selected is in ascending position
	// order, docs/spec.md §4): the indices were not sorted.
	Order bool `json:"order"`
}

// CaseResult is the verdict on one case.
type CaseResult struct {
	Case string `json:"case"`
	// Candidate says what was judged: the candidate file, or modref's own
	// implementation.
	Candidate string        `json:"candidate"`
	Pass      bool          `json:"pass"`
	Arrays    []ArrayResult `json:"arrays"`
	// Absent lists the arrays the candidate left out that were not judged:
	// those a port need not compute (Optional), and, when a diagnosis is
	// asked to allow it, any other; never guessed, they count neither way.
	Absent []string `json:"absent,omitempty"`
	// Error is set, and Pass false, when the candidate could not be judged
	// (bad input: an unreadable file, a wrong shape or dtype, a NaN): it
	// names what and where. Compare never sets it; callers that judge many
	// candidates record a bad one here and go on.
	Error string `json:"error,omitempty"`
	// Precision names the profile the case was judged under (empty: the
	// manifest's tolerances), and Baseline holds the profile's
	// measurements, the tolerances they gave and the near-tie margin
	// (Tolerances).
	Precision string         `json:"precision,omitempty"`
	Baseline  *ProfileReport `json:"baseline,omitempty"`
	// Flips reports routing decisions that differ from the truth's, when
	// JudgeFlips was asked: where, by how much, and whether the case was
	// rejudged under the candidate's decisions.
	Flips *FlipReport `json:"flips,omitempty"`
}

// ErrBadValue marks a candidate value no implementation can produce: a NaN
// or infinity, or a selected position outside the sequence.
var ErrBadValue = errors.New("invalid value")

// Compare judges a candidate's arrays against a case's expected arrays. A
// missing array, one of the wrong shape, a float array where integers are
// expected (or integers where floats are, except 0/1 targets), or a NaN or
// infinite value is bad input and returns an error naming the array, unless
// allowMissing lets missing arrays be reported as such. An array that is 0
// by configuration (ZeroByConfiguration) may be missing and is judged as
// zeros; a selected array of another width is judged as a routing
// mismatch.
func Compare(c *format.Case, cand map[string]*format.Array, allowMissing bool) (*CaseResult, error) {
	rule := RefuseMissing
	if allowMissing {
		rule = ReportMissing
	}
	return CompareWith(c, cand, rule)
}

// MissingRule is what CompareWith does with a required array the candidate
// left out.
type MissingRule int

const (
	// RefuseMissing makes it bad input.
	RefuseMissing MissingRule = iota
	// ReportMissing judges it missing, a failure.
	ReportMissing
	// SkipMissing lists it in Absent, not judged.
	SkipMissing
)

// CompareWith is Compare with a rule for missing arrays: an optional one is
// always listed in Absent.
func CompareWith(c *format.Case, cand map[string]*format.Array, rule MissingRule) (*CaseResult, error) {
	res := &CaseResult{Case: c.Manifest.Name, Pass: true}
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		name := format.CandidateName(info.Name)
		got, ok := cand[name]
		if !ok && ZeroByConfiguration(c, info.Name) {
			// An array that is 0 by configuration may be left out: it is
			// judged as zeros.
			got, ok = &format.Array{Shape: info.Shape, F: make([]float64, format.Elements(info.Shape)), DType: "<f8"}, true
		}
		if !ok && (rule == SkipMissing || Optional(c, info.Name)) {
			res.Absent = append(res.Absent, name)
			continue
		}
		if !ok {
			if rule == RefuseMissing {
				kind := "float32 or float64"
				if info.DType == "<i8" {
					kind = "int32 or int64"
				}
				return nil, fmt.Errorf("array %q is missing: the case expects shape %v, %s (--allow-missing reports it instead)", name, info.Shape, kind)
			}
			res.Arrays = append(res.Arrays, ArrayResult{Name: name, Status: StatusMissing, Tolerance: *info.Tolerance})
			res.Pass = false
			continue
		}
		want := c.Arrays[info.Name]
		if (strings.HasSuffix(info.Name, "selected") || strings.HasSuffix(info.Name, "expert_choice")) && got.I != nil {
			s := int64(c.Manifest.Config.SeqLen)
			for k, v := range got.I {
				if v < -1 || v >= s {
					return nil, fmt.Errorf("%w: array %q holds %d at %v; a selected position is −1 (none) or in [0, %d)", ErrBadValue, name, v, got.Index(k), s)
				}
			}
		}
		if r, ok := compareSelectedWidths(c, info, got, want); ok {
			r.Name = name
			res.Pass = res.Pass && r.Status == StatusPass
			res.Arrays = append(res.Arrays, r)
			continue
		}
		if !slices.Equal(got.Shape, want.Shape) {
			return nil, fmt.Errorf("array %q has shape %v, want %v", name, got.Shape, want.Shape)
		}
		switch {
		case want.IsInt() && !got.IsInt():
			return nil, fmt.Errorf("array %q has dtype %s, want integers (%s; int32 also accepted)", name, got.DType, want.DType)
		case !want.IsInt() && got.IsInt():
			if !strings.HasSuffix(name, "targets") || !zeroOne(got) {
				return nil, fmt.Errorf("array %q has dtype %s, want floating point (%s; float32 also accepted)", name, got.DType, want.DType)
			}
			// targets is a 0/1 mask: integers 0 and 1 say the same.
			got = asFloat(got)
		}
		if k := got.FirstNonFinite(); k >= 0 {
			return nil, fmt.Errorf("%w: array %q holds %v at %v", ErrBadValue, name, got.F[k], got.Index(k))
		}
		r := compareArray(c, info, got, want)
		r.Name = name
		if r.Status != StatusPass {
			res.Pass = false
		}
		res.Arrays = append(res.Arrays, r)
	}
	return res, nil
}

// ZeroByConfiguration reports whether an expected array is 0 by the case's
// configuration, so that a candidate may leave it out
// (docs/golden-format.md, "Candidates"): a layer's aux.total when its
// auxiliary and load-balancing weights are both 0.
func ZeroByConfiguration(c *format.Case, expected string) bool {
	if !strings.HasSuffix(expected, "aux.total") {
		return false
	}
	l := c.LayerConfig(strings.TrimSuffix(expected, "aux.total"))
	return l != nil && (l.Aux == spec.AuxNone || l.AuxWeight == 0) && l.LoadBalanceWeight == 0
}

// Optional reports whether a candidate may leave an expected array out, to
// have it listed as absent and not judged (docs/golden-format.md,
// "Candidates"): values that ports do not compute unless they need them. A
// layer's weights and multipliers, which its output and gradients judge
// already (most ports never hold g·m apart), and its targets where no loss
// reads them: no auxiliary loss, or one of weight 0; and each routed layer
// of a model case's per-layer arrays (oracle.LayerStageArrays:
// L<l>.weights, L<l>.multipliers, L<l>.targets, L<l>.out), which the
// logits and gradients judge already and which read the model layer by
// layer when written.
func Optional(c *format.Case, expected string) bool {
	if c.Manifest.Kind == format.KindModel {
		m := layerArray.FindStringSubmatch(strings.TrimPrefix(expected, "expected."))
		return strings.HasPrefix(expected, "expected.") && m != nil && slices.Contains(oracle.LayerStageArrays, m[2])
	}
	l := c.LayerConfig("expected.")
	if c.Manifest.Kind != format.KindLayer || l == nil {
		return false
	}
	switch expected {
	case "expected.weights", "expected.multipliers":
		return true
	case "expected.targets":
		return l.Aux == spec.AuxNone || l.AuxWeight == 0
	}
	return false
}

// zeroOne reports whether an integer array holds only 0 and 1.
func zeroOne(a *format.Array) bool {
	for _, v := range a.I {
		if v != 0 && v != 1 {
			return false
		}
	}
	return true
}

// compareSelectedWidths judges a list of selected positions (B×k, padded
// with −1) whose width differs from the oracle's: an implementation that
// selects a different number of tokens writes a different k. It compares
// the sets row by row; ok is false when the arrays are not such lists.
func compareSelectedWidths(c *format.Case, info format.ArrayInfo, got, want *format.Array) (ArrayResult, bool) {
	if !strings.HasSuffix(info.Name, "selected") || !got.IsInt() || len(got.Shape) != 2 || len(want.Shape) != 2 ||
		got.Shape[0] != want.Shape[0] || got.Shape[1] == want.Shape[1] {
		return ArrayResult{}, false
	}
	r := ArrayResult{Status: StatusPass, Tolerance: *info.Tolerance}
	if r.Routing = routingMismatch(c, info.Name, got, want); r.Routing == nil {
		return r, true
	}
	r.Status = StatusFail
	// The first element that differs, the narrower array read as padded
	// with −1 to the wider width.
	at := func(a *format.Array, b, j int) int64 {
		if j < a.Shape[1] {
			return a.I[b*a.Shape[1]+j]
		}
		return -1
	}
	for b := range want.Shape[0] {
		for j := range max(got.Shape[1], want.Shape[1]) {
			g, w := at(got, b, j), at(want, b, j)
			if g == w {
				continue
			}
			if r.Where == nil {
				r.Where, r.Got, r.Want = []int{b, j}, float64(g), float64(w)
			}
			r.MaxAbs = math.Max(r.MaxAbs, math.Abs(float64(g-w)))
		}
	}
	return r, true
}

// judgedRuns splits an array of this shape into runs of run consecutive
// elements, each judged or not as a whole (judged): keep(r) reports
// whether the r-th run is.
func judgedRuns(c *format.Case, shape []int) (run int, keep func(r int) bool) {
	cfg := c.Manifest.Config
	n := format.Elements(shape)
	if cfg.ValidLengths == nil || len(shape) < 2 || shape[0] != cfg.Batch || shape[1] != cfg.SeqLen || n == 0 {
		return max(n, 1), func(int) bool { return true }
	}
	return format.Elements(shape[2:]), func(r int) bool { return r%cfg.SeqLen < cfg.ValidLengths[r/cfg.SeqLen] }
}

// judged reports whether flat element k of an array of this shape is judged:
// arrays whose leading dimensions are B×S are judged at valid positions only.
func judged(c *format.Case, shape []int, k int) bool {
	cfg := c.Manifest.Config
	if cfg.ValidLengths == nil || len(shape) < 2 || shape[0] != cfg.Batch || shape[1] != cfg.SeqLen {
		return true
	}
	inner := format.Elements(shape[2:])
	b, i := k/(cfg.SeqLen*inner), (k/inner)%cfg.SeqLen
	return i < cfg.ValidLengths[b]
}

func compareArray(c *format.Case, info format.ArrayInfo, got, want *format.Array) ArrayResult {
	tol := *info.Tolerance
	r := ArrayResult{Status: StatusPass, Tolerance: tol}
	if want.IsInt() {
		for k := range want.I {
			if got.I[k] != want.I[k] && judged(c, want.Shape, k) {
				r.Status = StatusFail
				if r.Where == nil {
					r.Where, r.Got, r.Want = want.Index(k), float64(got.I[k]), float64(want.I[k])
				}
				r.MaxAbs = math.Max(r.MaxAbs, math.Abs(float64(got.I[k])-float64(want.I[k])))
			}
		}
		if r.Status == StatusFail && !strings.HasSuffix(info.Name, "expert_choice") {
			r.Routing = routingMismatch(c, info.Name, got, want)
		}
		return r
	}
	worst, at := -1.0, -1
	run, keep := judgedRuns(c, want.Shape)
	for k0 := 0; k0 < len(want.F); k0 += run {
		if !keep(k0 / run) {
			continue
		}
		for k := k0; k < min(k0+run, len(want.F)); k++ {
			e := want.F[k]
			d := math.Abs(got.F[k] - e)
			bound := tol.ATol + float64(tol.RTol*math.Abs(e))
			r.MaxAbs = max(r.MaxAbs, d) // math.Max's NaN and signed-zero rules
			if math.Abs(e) >= tol.ATol && e != 0 {
				r.MaxRel = max(r.MaxRel, d/math.Abs(e))
			}
			ratio := math.Inf(1)
			if bound > 0 {
				ratio = d / bound
			} else if d == 0 {
				ratio = 0
			}
			if ratio > worst {
				worst, at = ratio, k
			}
			if d > bound {
				r.Status = StatusFail
			}
		}
	}
	if at >= 0 {
		r.Where, r.Got, r.Want = want.Index(at), got.F[at], want.F[at]
	}
	if r.Status == StatusFail && strings.HasSuffix(info.Name, ".targets") {
		r.Routing = routingMismatch(c, info.Name, got, want)
	}
	return r
}

// routingMismatch describes, row by row, how a candidate's routing differs
// from the oracle's. It understands the three encodings of a decision:
// selected positions (B×k, padded with −1), 0/1 routed flags and 0/1
// targets (B×S).
func routingMismatch(c *format.Case, name string, got, want *format.Array) []RowMismatch {
	prefix := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "selected"), "routed"), "targets")
	scores := c.Arrays[prefix+"router_logits"]
	causal := false
	if l := c.LayerConfig(prefix); l != nil && l.Causal != "off" {
		causal = true
		if l.Causal == "predictor" {
			scores = c.Arrays[prefix+"predictor_logits"]
		}
	}
	seqLen := c.Manifest.Config.SeqLen
	if scores != nil && !slices.Equal(scores.Shape, []int{want.Shape[0], seqLen}) {
		scores = nil
	}
	var out []RowMismatch
	for b := 0; b < want.Shape[0]; b++ {
		gs, ws := decisions(got, b, strings.HasSuffix(name, "selected"), seqLen), decisions(want, b, strings.HasSuffix(name, "selected"), seqLen)
		m := RowMismatch{Row: b, Gap: math.Inf(1), Causal: causal, Candidate: len(gs), Oracle: len(ws)}
		m.OnlyCandidate, m.OnlyOracle = onlyIn(gs, ws), onlyIn(ws, gs)
		if m.OnlyCandidate == nil && m.OnlyOracle == nil {
			if strings.HasSuffix(name, "selected") && !sameRow(got, want, b) {
				m.Order = true
				out = append(out, m)
			}
			continue
		}
		if scores != nil {
			s := scores.F[b*seqLen : (b+1)*seqLen]
			m.Gap = flipGap(s, m.OnlyCandidate, m.OnlyOracle, causal)
		}
		m.Tie = m.Gap == 0
		m.NearTie = m.Gap < c.Manifest.Routing.Margin && !m.Tie
		v := oracle.ValidLen(c.Manifest.Config.ValidLengths, b, c.Manifest.Config.SeqLen)
		m.RoutesAll = m.Candidate == v && m.Oracle < v
		out = append(out, m)
	}
	return out
}

// onlyIn returns the positions of a that b lacks, in ascending order (nil
// when none).
func onlyIn(a, b map[int]bool) []int {
	var out []int
	for p := range a {
		if !b[p] {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// sameRow reports whether row b of two lists of positions (padded with
// −1, perhaps to other widths) lists the same positions in the same order.
func sameRow(a, b *format.Array, row int) bool {
	listed := func(x *format.Array) []int64 {
		w := format.Elements(x.Shape[1:])
		return slices.DeleteFunc(slices.Clone(x.I[row*w:(row+1)*w]), func(p int64) bool { return p < 0 })
	}
	return slices.Equal(listed(a), listed(b))
}

// decisions returns the set of routed positions of row b. A list of
// positions counts only entries in [0, seqLen) (Compare refuses others).
func decisions(a *format.Array, b int, positions bool, seqLen int) map[int]bool {
	inner := format.Elements(a.Shape[1:])
	set := make(map[int]bool)
	for j := 0; j < inner; j++ {
		routed := false
		if a.I != nil {
			v := a.I[b*inner+j]
			routed = v != 0
			if positions && v >= 0 && v < int64(seqLen) {
				set[int(v)] = true
			}
		} else {
			routed = a.F[b*inner+j] != 0
		}
		if !positions && routed {
			set[j] = true
		}
	}
	return set
}

// flipGap is the smallest score difference a routing flip crossed: for
// top-k, between a position only one side routed and one only the other
// side routed; for causal routing, the distance of a flipped score from 0.
func flipGap(s []float64, onlyCand, onlyOracle []int, causal bool) float64 {
	gap := math.Inf(1)
	if causal {
		for _, p := range append(append([]int{}, onlyCand...), onlyOracle...) {
			if p < len(s) {
				gap = math.Min(gap, math.Abs(s[p]))
			}
		}
		return gap
	}
	for _, p := range onlyCand {
		for _, q := range onlyOracle {
			if p < len(s) && q < len(s) {
				gap = math.Min(gap, math.Abs(s[p]-s[q]))
			}
		}
	}
	return gap
}

// asFloat returns an integer array's values as a float64 array.
func asFloat(a *format.Array) *format.Array {
	v := make([]float64, len(a.I))
	for k, x := range a.I {
		v[k] = float64(x)
	}
	return format.Float(v, a.Shape...)
}

// jsonFloat is a float64 as JSON can hold it: infinities, which a gap with
// no flip between two tokens or a difference beyond float64's range are,
// become the strings "inf" and "-inf".
func jsonFloat(v float64) any {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return v
}

// MarshalJSON writes an infinite gap as "inf".
func (m RowMismatch) MarshalJSON() ([]byte, error) {
	type plain RowMismatch
	return json.Marshal(struct {
		plain
		Gap any `json:"gap"`
	}{plain(m), jsonFloat(m.Gap)})
}

// MarshalJSON writes infinite differences as "inf".
func (r ArrayResult) MarshalJSON() ([]byte, error) {
	type plain ArrayResult
	return json.Marshal(struct {
		plain
		MaxAbs any `json:"max_abs"`
		MaxRel any `json:"max_rel"`
	}{plain(r), jsonFloat(r.MaxAbs), jsonFloat(r.MaxRel)})
}
