package judge

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// FlipReport says how a candidate's routing decisions differ from the
// truth's at near-ties, and how it was judged (JudgeFlips).
type FlipReport struct {
	// Flips lists the flipped decisions, layer by layer and row by row.
	Flips []Flip `json:"flips"`
	// Count is the number of flipped decisions (tokens routed by one side
	// only), NearTies the number of the truth's decisions within the
	// margin (a token exactly on a top-k boundary, an exact tie, among
	// them), and Limit the most flips NearTies explains.
	Count    int `json:"count"`
	NearTies int `json:"near_ties"`
	Limit    int `json:"limit"`
	// Margin is the near-tie margin the flips were held to; GateMargin
	// the one a MoDE case's expert choice is held to, in gates (twice the
	// gates' tolerance).
	Margin     float64 `json:"margin"`
	GateMargin float64 `json:"gate_margin,omitempty"`
	// Verdict says what was done: "rejudged" (every flip within the
	// margin and not too many: values and gradients judged against the
	// truth recomputed with the candidate's decisions frozen), or why not.
	Verdict string `json:"verdict"`
}

// Flip is the flipped decisions of one row of one routed layer.
type Flip struct {
	// Layer is the routed layer's index in a model (-1 in a layer case).
	Layer int `json:"layer"`
	Row   int `json:"row"`
	// Expert is, for a MoDE case's expert choice, the expert whose choice
	// flipped (its distance measured in gates); nil for a routing decision.
	Expert *int `json:"expert,omitempty"`
	// OnlyCandidate and OnlyOracle are the positions only one side routed.
	OnlyCandidate []int `json:"only_candidate"`
	OnlyOracle    []int `json:"only_oracle"`
	// Distance is the largest distance of a flipped token's score from
	// the truth's decision boundary (the k-th or (k+1)-th router weight, or
	// 0 under causal routing): by how much the flip crossed it.
	Distance float64 `json:"distance"`
	// Within says every flipped token is within the margin of the
	// boundary, and the row routed as many tokens as the truth's. A token
	// exactly on it, where the truth's tie rule decided, is within only
	// when the candidate's own router weights order it against the tokens
	// it is tied with the candidate's way (RoundOffTie).
	Within bool `json:"within"`
	// RoundOffTie says some flipped token is exactly tied in the truth with
	// a token flipped the other way, and the candidate's own router
	// weights, apart by less than the margin, put the one it routed above
	// the one it left out: its round-off broke the tie, not its tie rule.
	RoundOffTie bool `json:"round_off_tie,omitempty"`
}

// Verdicts of a FlipReport.
const (
	FlipsRejudged   = "rejudged"
	FlipsBeyond     = "a flip beyond the margin, an exact tie broken against the candidate's own router weights, or another number of tokens routed"
	FlipsTooMany    = "too many flips"
	FlipsNotHandled = "flips in this kind of case are not rejudged"
)

// JudgeFlips re-judges a comparison that failed on routing decisions. When
// every flipped decision lies within the case's near-tie margin of the
// truth's decision boundary (exactly on it, an exact tie of top-k routing
// that the truth's tie rule decided, only where the candidate's own router
// weights order the tied tokens its way: roundOffTie), every row routes as
// many tokens as the truth's, and there are no
// more flips than Limit allows, the truth is recomputed with the
// candidate's decisions frozen, in every routed layer in order (a flip in
// one layer moves the inputs of the next), and the candidate is judged
// against that, values and gradients, by c's tolerances. The result records
// the flips either way (docs/tolerances.md, "Routing flips at near-ties").
// A result without a routing mismatch is returned as it is. A decode
// case is recomputed as its full causal forward, at the candidate's
// selected, and its decoded arrays at the candidate's routed (frozenDecode);
// a MoDE case at the candidate's selection and expert choice, each expert's
// flips measured in gates from its k_e-th and (k_e+1)-th gate over the
// truth's computed tokens, within twice the gates' tolerance (expertFlips). The error is for a
// case whose truth cannot be recomputed; a candidate's decisions that the
// layer cannot run are a failure, with the reason in the report.
func JudgeFlips(c *format.Case, cand map[string]*format.Array, res *CaseResult, allowMissing bool) (*CaseResult, error) {
	rep := flipsOf(c, cand, res)
	if rep == nil {
		return res, nil
	}
	res.Flips = rep
	switch {
	case rep.Verdict != "":
		return res, nil
	case rep.Count > rep.Limit:
		rep.Verdict = FlipsTooMany
		return res, nil
	}
	fc, err := frozenTruth(c, cand)
	if err != nil {
		// The candidate's decisions are not ones the layer can run (a
		// padded position routed, say): a failure, not bad input.
		rep.Verdict = "not rejudged: the truth cannot be recomputed at the candidate's decisions: " + err.Error()
		return res, nil
	}
	out, err := Compare(fc, cand, allowMissing)
	if err != nil {
		return nil, err
	}
	rep.Verdict = FlipsRejudged
	out.Flips = rep
	return out, nil
}

// FlipLimit is the most flips d decisions within the margin explain: a
// correct implementation's error is as likely to fall either side, so it
// flips each such decision with probability at most about 1/2, and the
// count is at most Binomial(d, 1/2)'s mean plus three standard deviations,
// d/2 + 1.5·√d, rounded down; at least 1.
func FlipLimit(d int) int {
	return max(1, int(float64(float64(d)/2)+float64(1.5*math.Sqrt(float64(d)))))
}

// flipsOf reads the routing mismatches of a failed comparison. It returns
// nil when there are none, and a report whose Verdict is set when they are
// not near-tie flips.
func flipsOf(c *format.Case, cand map[string]*format.Array, res *CaseResult) *FlipReport {
	rep := &FlipReport{Margin: c.Manifest.Routing.Margin}
	mismatch := expertFlips(c, cand, res, rep)
	// A decode case's routed flips the tokens its selected flipped (the
	// same decisions, decoded token by token): a token counts once.
	type token struct{ layer, row, pos int }
	seen := map[token]bool{}
	for _, a := range res.Arrays {
		if a.Status != StatusFail || len(a.Routing) == 0 {
			continue
		}
		mismatch = true
		prefix, kind := routingArray("expected." + a.Name)
		if kind == "" {
			rep.Verdict = FlipsNotHandled
			continue
		}
		if kind == "targets" && !causalLayer(c, prefix) {
			continue // the selection's own flips, counted there
		}
		for _, m := range a.Routing {
			f := Flip{Layer: layerOf(prefix), Row: m.Row, OnlyCandidate: m.OnlyCandidate, OnlyOracle: m.OnlyOracle}
			f.Distance, f.Within, f.RoundOffTie = flipDistance(c, cand, prefix, kind, m)
			if m.Order || !f.Within {
				rep.Verdict = FlipsBeyond
			}
			fresh := false
			for _, p := range slices.Concat(m.OnlyCandidate, m.OnlyOracle) {
				if t := (token{f.Layer, m.Row, p}); !seen[t] {
					seen[t], fresh = true, true
					rep.Count++
				}
			}
			if fresh {
				rep.Flips = append(rep.Flips, f)
			}
		}
	}
	if !mismatch {
		return nil
	}
	for _, info := range c.Manifest.Arrays {
		if prefix, kind := routingArray(info.Name); kind == "selected" || kind == "targets" && causalLayer(c, prefix) {
			rep.NearTies += nearTies(c, prefix, kind)
		}
	}
	rep.Limit = FlipLimit(rep.NearTies)
	return rep
}

// expertFlips adds a MoDE case's expert-choice flips to rep, and reports
// whether the expert choice failed. In row b, expert e's boundary is its
// k_e-th largest gate (the truth's, over the tokens the truth computed) and
// the largest it left out: a token only the candidate's expert took must
// lie within rep.GateMargin below the first, one only the truth's took
// within it above the second. A token the truth did not compute has no
// gate to measure (a flip of the staged selection beside it): beyond.
func expertFlips(c *format.Case, cand map[string]*format.Array, res *CaseResult, rep *FlipReport) bool {
	failed := false
	for _, a := range res.Arrays {
		failed = failed || a.Name == "expert_choice" && a.Status == StatusFail
	}
	want, gates, info := c.Arrays["expected.expert_choice"], c.Arrays["expected.gates"], gatesInfo(c)
	got := cand["expert_choice"]
	if !failed || want == nil || gates == nil || info == nil || got == nil || !slices.Equal(got.Shape, want.Shape) || len(want.Shape) != 3 {
		if failed {
			rep.Verdict = FlipsNotHandled
		}
		return failed
	}
	rep.GateMargin = flipMarginTols * (info.Tolerance.ATol + info.Tolerance.RTol)
	seqLen, width, ke := c.Manifest.Config.SeqLen, want.Shape[1], want.Shape[2]
	computed := func(b int) map[int]bool {
		if sel := c.Arrays["expected.selected"]; sel != nil {
			return decisions(sel, b, true, seqLen)
		}
		all := map[int]bool{}
		for p := range seqLen {
			all[p] = true
		}
		return all
	}
	for b := range want.Shape[0] {
		in := computed(b)
		for e := range width {
			list := func(a *format.Array) map[int]bool {
				set := map[int]bool{}
				for _, p := range a.I[(b*width+e)*ke : (b*width+e+1)*ke] {
					set[int(p)] = true
				}
				return set
			}
			gs, ws := list(got), list(want)
			g := func(p int) float64 { return gates.F[(b*seqLen+p)*width+e] }
			kth, next := math.Inf(1), math.Inf(-1)
			for p := range in {
				if ws[p] {
					kth = math.Min(kth, g(p))
				} else {
					next = math.Max(next, g(p))
				}
			}
			f := Flip{Layer: -1, Row: b, Expert: &e, Within: true, OnlyCandidate: onlyIn(gs, ws), OnlyOracle: onlyIn(ws, gs)}
			for p := range in {
				if d := expertDistance(g(p), ws[p], kth, next); d > 0 && d < rep.GateMargin {
					rep.NearTies++
				}
			}
			if f.OnlyCandidate == nil && f.OnlyOracle == nil {
				continue
			}
			for _, p := range slices.Concat(f.OnlyCandidate, f.OnlyOracle) {
				d := math.Inf(1)
				if in[p] {
					d = expertDistance(g(p), ws[p], kth, next)
				}
				f.Distance = math.Max(f.Distance, d)
				f.Within = f.Within && d > 0 && d < rep.GateMargin
				rep.Count++
			}
			if !f.Within || len(f.OnlyCandidate) != len(f.OnlyOracle) {
				f.Within = false
				rep.Verdict = FlipsBeyond
			}
			rep.Flips = append(rep.Flips, f)
		}
	}
	return true
}

// expertDistance is how far a gate is from an expert's boundary on the
// side that decides it: chosen means the truth's expert chose the token.
func expertDistance(g float64, chosen bool, kth, next float64) float64 {
	if chosen {
		return g - next
	}
	return kth - g
}

// gatesInfo returns the manifest's entry of a MoDE case's gates, or nil.
func gatesInfo(c *format.Case) *format.ArrayInfo {
	for i, info := range c.Manifest.Arrays {
		if info.Name == "expected.gates" && info.Tolerance != nil {
			return &c.Manifest.Arrays[i]
		}
	}
	return nil
}

// causalLayer reports whether the routed layer of a prefix routes
// causally, so that its targets (the top-k) are decisions of their own.
func causalLayer(c *format.Case, prefix string) bool {
	l := c.LayerConfig(prefix)
	return l != nil && l.Causal != spec.CausalOff
}

// routingArray splits a routing array's name into its layer prefix and its
// kind: "selected", "targets" or "routed"; kind is "" for other arrays.
func routingArray(name string) (prefix, kind string) {
	for _, k := range []string{"selected", "targets", "routed"} {
		if strings.HasSuffix(name, k) {
			return strings.TrimSuffix(name, k), k
		}
	}
	return name, ""
}

// layerOf returns the layer index of a prefix "expected.L<l>.", or -1.
func layerOf(prefix string) int {
	var l int
	if _, err := fmt.Sscanf(prefix, "expected.L%d.", &l); err != nil {
		return -1
	}
	return l
}

// boundary describes the truth's decision in one row of valid tokens: the
// scores, and either the causal threshold 0 or, under top-k, the set
// selected, its smallest score kth and the largest score left out, next.
type boundary struct {
	s         []float64
	causal    bool
	set       map[int]bool
	kth, next float64
	valid     int
}

// routed reports whether the truth routed position p.
func (bd boundary) routed(p int) bool {
	if bd.causal {
		return bd.s[p] > 0
	}
	return bd.set[p]
}

// rowBoundary returns the truth's boundary of row b for a routing array
// (prefix, kind): targets are the top-k under the capacity by router
// weights; selected and routed follow the layer's routing (causal by the
// sign of the router weight or the predictor logit).
func rowBoundary(c *format.Case, prefix, kind string, b int) (boundary, bool) {
	l := c.LayerConfig(prefix)
	seqLen := c.Manifest.Config.SeqLen
	scores := c.Arrays[prefix+"router_logits"]
	causal := l != nil && l.Causal != spec.CausalOff && kind != "targets"
	if causal && l.Causal == spec.CausalPredictor {
		scores = c.Arrays[prefix+"predictor_logits"]
	}
	if scores == nil || len(scores.F) < (b+1)*seqLen {
		return boundary{}, false
	}
	bd := boundary{s: scores.F[b*seqLen : (b+1)*seqLen], causal: causal, valid: oracle.ValidLen(c.Manifest.Config.ValidLengths, b, seqLen)}
	if causal {
		return bd, true
	}
	want := c.Arrays[prefix+kind]
	if want == nil {
		return boundary{}, false
	}
	bd.set = decisions(want, b, kind == "selected", seqLen)
	bd.kth, bd.next = math.Inf(1), math.Inf(-1)
	for p := range bd.valid {
		if bd.set[p] {
			bd.kth = math.Min(bd.kth, bd.s[p])
		} else {
			bd.next = math.Max(bd.next, bd.s[p])
		}
	}
	return bd, true
}

// distance is how far token p's score is from the boundary on the side
// that decides it: routed means the truth routed it.
func (bd boundary) distance(p int, routed bool) float64 {
	switch {
	case bd.causal:
		return math.Abs(bd.s[p])
	case routed:
		return bd.s[p] - bd.next
	}
	return bd.kth - bd.s[p]
}

// flipDistance returns the largest distance of a flipped token of a row
// from the truth's boundary, and whether every flipped token is within the
// margin of it with the row routing as many tokens as the truth's under
// top-k: strictly inside, or exactly on it where the candidate's own router
// weights broke the tie (roundOffTie), which tie reports.
func flipDistance(c *format.Case, cand map[string]*format.Array, prefix, kind string, m RowMismatch) (dist float64, within, tie bool) {
	bd, ok := rowBoundary(c, prefix, kind, m.Row)
	if !ok || m.Order || (!bd.causal && len(m.OnlyCandidate) != len(m.OnlyOracle)) {
		return math.Inf(1), false, false
	}
	margin := c.Manifest.Routing.Margin
	worst, within := 0.0, true
	check := func(ps, other []int, routed bool) {
		for _, p := range ps {
			if p >= bd.valid {
				worst, within = math.Inf(1), false
				continue
			}
			d := bd.distance(p, routed)
			worst = math.Max(worst, d)
			switch {
			case d > 0 && d < margin:
			case d == 0 && !bd.causal && tieRuleKept(bd, m, p):
				// Exactly on the boundary, with the tokens tied with it
				// routed as the tie rule routes them: it crossed with its
				// tie kept, because a token within the margin crossed the
				// other way (whose own distance is checked).
			case d == 0 && !bd.causal && roundOffTie(c, cand, prefix, m.Row, p, other, routed):
				tie = true
			case d == 0 && !bd.causal && ownOrderKept(c, cand, prefix, m.Row, p, other, routed):
				// On the boundary, and routed against every token flipped
				// the other way as the candidate's own router weights and
				// the tie rule route it.
			default:
				within = false
			}
		}
	}
	check(m.OnlyCandidate, m.OnlyOracle, false)
	check(m.OnlyOracle, m.OnlyCandidate, true)
	return worst, within, tie
}

// tieRuleKept reports whether, among the tokens of a top-k row whose
// truth's router weights are exactly token p's, the candidate's decisions
// (the truth's, bd.set, changed by m) route a set the tie rule could
// route: every one routed at a lower position than every one left out
// (docs/spec.md §4). p sits exactly on the truth's boundary, tied with the
// k-th weight or the largest left out; the whole tie moved across it
// together, the lower positions first, when a token within the margin on
// the other side crossed the other way: fuzz-13-98 (bf16, a layer at
// d = 128) routed both tokens of an exact tie at the boundary and left out
// a token 0.0021 above it, well inside the margin 0.25.
func tieRuleKept(bd boundary, m RowMismatch, p int) bool {
	routes := func(x int) bool {
		return bd.set[x] && !slices.Contains(m.OnlyOracle, x) || slices.Contains(m.OnlyCandidate, x)
	}
	highestIn, lowestOut := -1, bd.valid
	for t := range bd.valid {
		if bd.s[t] != bd.s[p] {
			continue
		}
		if routes(t) {
			highestIn = max(highestIn, t)
		} else {
			lowestOut = min(lowestOut, t)
		}
	}
	return highestIn < lowestOut
}

// ownOrderKept reports whether token p of row b of a top-k routed layer
// (prefix), exactly on the truth's boundary, was decided against each
// token of other (those flipped the other way) as the candidate's own
// router weights, which it is judged on too, decide it: the token it
// routed strictly above the one it left out, or equal to it at a lower
// position (docs/spec.md §4), and by less than the near-tie margin. A
// row whose truth's weights at the boundary are a whole group of equal
// values (or a unit of float64 apart: one token repeated, as a vocabulary
// of two makes it) is routed among them by round-off in any other
// arithmetic: fuzz-24-44 (bf16 autocast, a model at d = 8) routed five
// tokens of such a group of twelve differently from the truth, each pair
// as its own bf16 weights order them. A candidate whose tie rule is wrong
// fails it wherever its own weights tie.
func ownOrderKept(c *format.Case, cand map[string]*format.Array, prefix string, b, p int, other []int, routed bool) bool {
	seqLen := c.Manifest.Config.SeqLen
	truth, mine := c.Arrays[prefix+"router_logits"], cand[format.CandidateName(prefix+"router_logits")]
	if truth == nil || mine == nil || mine.F == nil || !slices.Equal(mine.Shape, truth.Shape) || len(truth.F) < (b+1)*seqLen || len(other) == 0 {
		return false
	}
	own := mine.F[b*seqLen : (b+1)*seqLen]
	for _, q := range other {
		if q >= len(own) {
			return false
		}
		in, out := p, q // the token the candidate routed, the one it left out
		if routed {
			in, out = q, p
		}
		if gap := own[in] - own[out]; !(gap > 0 || gap == 0 && in < out) || gap >= c.Manifest.Routing.Margin {
			return false
		}
	}
	return true
}

// roundOffTie reports whether token p of row b of a top-k routed layer
// (prefix), whose truth's router weight is exactly the truth's boundary
// (routed: the truth routed it), flipped because the candidate's round-off
// broke an exact tie: p is exactly tied in the truth with some token of
// other, the tokens flipped the other way, and with each of them the
// candidate's own router weights (its router_logits, which it is judged on
// too) put the token it routed strictly above the one it left out, by less
// than the near-tie margin. A float32 implementation may compute a tied
// token's two copies with different bits (a matrix kernel treats a block's
// last rows otherwise) and so route either; a candidate whose weights for
// the tied tokens are equal had its tie rule to decide, and broke it
// (docs/tolerances.md, "Exact ties broken by round-off").
func roundOffTie(c *format.Case, cand map[string]*format.Array, prefix string, b, p int, other []int, routed bool) bool {
	seqLen := c.Manifest.Config.SeqLen
	truth, mine := c.Arrays[prefix+"router_logits"], cand[format.CandidateName(prefix+"router_logits")]
	if truth == nil || mine == nil || mine.F == nil || !slices.Equal(mine.Shape, truth.Shape) || len(truth.F) < (b+1)*seqLen {
		return false
	}
	s, own := truth.F[b*seqLen:(b+1)*seqLen], mine.F[b*seqLen:(b+1)*seqLen]
	tied := false
	for _, q := range other {
		if q >= len(s) || s[q] != s[p] {
			continue
		}
		tied = true
		in, out := p, q // the token the candidate routed, the one it left out
		if routed {
			in, out = q, p
		}
		if gap := own[in] - own[out]; !(gap > 0 && gap < c.Manifest.Routing.Margin) {
			return false
		}
	}
	return tied
}

// nearTies counts the truth's decisions of a routing array within the
// margin of the boundary, over every row.
func nearTies(c *format.Case, prefix, kind string) int {
	n := 0
	for b := range c.Manifest.Config.Batch {
		bd, ok := rowBoundary(c, prefix, kind, b)
		if !ok {
			continue
		}
		for p := range bd.valid {
			// A token exactly on a top-k boundary (an exact tie) is a
			// decision the candidate's round-off may flip too (roundOffTie).
			if d := bd.distance(p, bd.routed(p)); (d > 0 || d == 0 && !bd.causal) && d < c.Manifest.Routing.Margin {
				n++
			}
		}
	}
	return n
}

// candidateSelection reads a candidate's decisions for a routing array as
// a ref.Selection: positions from a selected list, or the 1s of a 0/1
// array. ok is false when the candidate has no such array.
func candidateSelection(c *format.Case, cand map[string]*format.Array, name string) (ref.Selection, bool) {
	a, ok := cand[format.CandidateName(name)]
	if !ok {
		return ref.Selection{}, false
	}
	seqLen := c.Manifest.Config.SeqLen
	sel := ref.Selection{S: seqLen, Rows: make([][]int, c.Manifest.Config.Batch)}
	for b := range sel.Rows {
		set := decisions(a, b, strings.HasSuffix(name, "selected"), seqLen)
		for p := range set {
			sel.Rows[b] = append(sel.Rows[b], p)
		}
		sort.Ints(sel.Rows[b])
	}
	return sel, true
}

// frozenTruth recomputes a layer or model case with the candidate's routing
// decisions frozen in every routed layer, in order, and returns the case
// with its expected arrays replaced by the recomputed ones (manifest and
// tolerances kept).
func frozenTruth(c *format.Case, cand map[string]*format.Array) (*format.Case, error) {
	m := c.Manifest
	cfg := m.Config
	var re *format.Case
	switch m.Kind {
	case format.KindLayer:
		s := oracle.LayerSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
			Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: *cfg.Layer, Ties: m.Routing.Ties}
		dr, err := oracle.LayerDrawOf(c, s)
		if err != nil {
			return nil, err
		}
		fz, err := frozenLayer(c, cand, "expected.", "selected", s.Config, dr.P, dr.In)
		if err != nil {
			return nil, err
		}
		res, err := ref.LayerForwardFrozen(s.Config, dr.P, dr.In, fz)
		if err != nil {
			return nil, err
		}
		if re, err = oracle.LayerCase(s, m.Provenance.Seed, dr, res, oracle.LayerGaps(s.Config, res, cfg.ValidLengths)); err != nil {
			return nil, err
		}
	case format.KindModel:
		s, p, in, res, err := frozenModel(c, cand, "selected")
		if err != nil {
			return nil, err
		}
		var gaps [][]float64
		for l, lr := range res.Layers {
			if lr != nil {
				gaps = append(gaps, oracle.LayerGaps(s.Config.Layers[l].Config, lr, cfg.ValidLengths))
			}
		}
		if re, err = oracle.ModelCase(s, m.Provenance.Seed, p, in, res, gaps); err != nil {
			return nil, err
		}
	case format.KindDecode:
		var err error
		if re, err = frozenDecode(c, cand); err != nil {
			return nil, err
		}
	case format.KindMoDE:
		var err error
		if re, err = frozenMoDE(c, cand); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("kind %q is not rejudged", m.Kind)
	}
	arrays := make(map[string]*format.Array, len(c.Arrays))
	for name, a := range c.Arrays {
		arrays[name] = a
	}
	for _, info := range m.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		a, ok := re.Arrays[info.Name]
		if !ok || !slices.Equal(a.Shape, info.Shape) && !strings.HasSuffix(info.Name, "selected") {
			return nil, fmt.Errorf("array %q was not recomputed as the case has it", info.Name)
		}
		arrays[info.Name] = a
	}
	return &format.Case{Manifest: m, Arrays: arrays}, nil
}

// frozenModel recomputes a model or decode case's forward with the
// candidate's decisions frozen in every routed layer, in order: each
// layer's from the candidate's array decision ("selected", or a decode
// case's token-by-token "routed"), at that layer's input as the earlier
// frozen layers make it.
func frozenModel(c *format.Case, cand map[string]*format.Array, decision string) (oracle.ModelSpec, *ref.ModelParams, ref.ModelInputs, *ref.ModelResult, error) {
	m := c.Manifest
	cfg := m.Config
	s := oracle.ModelSpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: cfg.ModelConfig()}
	p, in, err := oracle.ModelDrawOf(c, s)
	if err != nil {
		return s, nil, in, nil, err
	}
	fz := ref.ModelFrozen{Layers: make([]ref.Frozen, len(s.Config.Layers))}
	x := ref.Embed(p, in.Tokens, in.Valid)
	for l, ml := range s.Config.Layers {
		if !ml.Routed {
			if x, err = ref.DenseLayerForward(s.Config.Block(), &p.Layers[l].Block, x, in.Valid); err != nil {
				return s, nil, in, nil, err
			}
			continue
		}
		lin := ref.LayerInputs{X: x, Valid: in.Valid, Noise: in.Noise[l], Jitter: in.Jitter[l]}
		if fz.Layers[l], err = frozenLayer(c, cand, fmt.Sprintf("expected.L%d.", l), decision, ml.Config, p.Layers[l], lin); err != nil {
			return s, nil, in, nil, fmt.Errorf("layer %d: %w", l, err)
		}
		r, err := ref.LayerForwardFrozen(ml.Config, p.Layers[l], lin, fz.Layers[l])
		if err != nil {
			return s, nil, in, nil, fmt.Errorf("layer %d: %w", l, err)
		}
		x = r.Out
	}
	res, err := ref.ModelForwardFrozen(s.Config, p, in, fz)
	return s, p, in, res, err
}

// frozenDecode recomputes a decode case at the candidate's decisions. Its
// routing is causal, each token decided by its own score, so token-by-token
// decoding at given decisions computes what the full causal forward at the
// same decisions does: the full forward's arrays (logits, router and
// predictor logits, selected) are recomputed at the candidate's selected,
// and the decoded ones (decode_logits, routed) at its routed, 0 at padded
// positions as the case writes them.
func frozenDecode(c *format.Case, cand map[string]*format.Array) (*format.Case, error) {
	m := c.Manifest
	cfg := m.Config
	s, _, _, full, err := frozenModel(c, cand, "selected")
	if err != nil {
		return nil, err
	}
	_, _, _, dec, err := frozenModel(c, cand, "routed")
	if err != nil {
		return nil, err
	}
	arrays := map[string]*format.Array{"expected.logits": oracle.BatchArray(full.Logits)}
	vocab := s.Config.Vocab
	logits := oracle.BatchArray(dec.Logits)
	for b := range cfg.Batch {
		from := (b*cfg.SeqLen + oracle.ValidLen(cfg.ValidLengths, b, cfg.SeqLen)) * vocab
		clear(logits.F[from : (b+1)*cfg.SeqLen*vocab])
	}
	arrays["expected.decode_logits"] = logits
	for l, lr := range full.Layers {
		if lr == nil {
			continue
		}
		pre := fmt.Sprintf("expected.L%d.", l)
		arrays[pre+"router_logits"] = oracle.FieldArray(lr.RouterWeights, cfg.ValidLengths)
		arrays[pre+"selected"] = oracle.SelectedArray(lr.Selection)
		if lr.PredictorLogits != nil {
			arrays[pre+"predictor_logits"] = oracle.FieldArray(lr.PredictorLogits, cfg.ValidLengths)
		}
		routed := make([][]int, cfg.Batch)
		for b := range routed {
			routed[b] = make([]int, cfg.SeqLen)
			for _, p := range dec.Layers[l].Selection.Rows[b] {
				routed[b][p] = 1
			}
		}
		arrays[pre+"routed"] = oracle.IntGrid(routed)
	}
	return &format.Case{Manifest: m, Arrays: arrays}, nil
}

// frozenMoDE recomputes a MoDE case at the candidate's decisions: the
// staged form's selection (the integrated form computes every token) and
// every expert's choice.
func frozenMoDE(c *format.Case, cand map[string]*format.Array) (*format.Case, error) {
	m := c.Manifest
	cfg := m.Config
	s := oracle.MoDESpec{Name: m.Name, Description: m.Description, Catches: m.Catches,
		Batch: cfg.Batch, SeqLen: cfg.SeqLen, Config: *cfg.MoDE}
	dr, err := oracle.MoDEDrawOf(c, s)
	if err != nil {
		return nil, err
	}
	fz := ref.MoDEFrozen{Selection: ref.Selection{S: cfg.SeqLen, Rows: make([][]int, cfg.Batch)}}
	if _, ok := c.Arrays["expected.selected"]; ok {
		if fz.Selection, ok = candidateSelection(c, cand, "expected.selected"); !ok {
			return nil, fmt.Errorf("the candidate has no selected")
		}
	} else {
		for b := range fz.Selection.Rows {
			for p := range cfg.SeqLen {
				fz.Selection.Rows[b] = append(fz.Selection.Rows[b], p)
			}
		}
	}
	ch, ok := cand["expert_choice"]
	want := c.Arrays["expected.expert_choice"]
	if !ok || want == nil || !slices.Equal(ch.Shape, want.Shape) || len(ch.Shape) != 3 || !ch.IsInt() {
		return nil, fmt.Errorf("the candidate has no expert_choice of the case's shape")
	}
	width, ke := ch.Shape[1], ch.Shape[2]
	for b := range cfg.Batch {
		row := make([][]int, width)
		for e := range row {
			for _, p := range ch.I[(b*width+e)*ke : (b*width+e+1)*ke] {
				row[e] = append(row[e], int(p))
			}
			slices.Sort(row[e])
		}
		fz.Experts = append(fz.Experts, row)
	}
	res, err := ref.MoDEForwardFrozen(s.Config, dr.P, dr.X, fz)
	if err != nil {
		return nil, err
	}
	return oracle.MoDECase(s, m.Provenance.Seed, dr, res, oracle.MoDEGaps(res))
}

// frozenLayer freezes one routed layer at the candidate's decision: its
// selection (prefix+decision: "selected", or a decode case's "routed"), and under causal routing its targets'
// top-k when the candidate wrote targets; the stop-gradient constants are
// the layer's own at its input (ref.NewFrozen).
func frozenLayer(c *format.Case, cand map[string]*format.Array, prefix, decision string, cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) (ref.Frozen, error) {
	sel, ok := candidateSelection(c, cand, prefix+decision)
	if !ok {
		return ref.Frozen{}, fmt.Errorf("the candidate has no %s", format.CandidateName(prefix+decision))
	}
	fz, err := ref.NewFrozen(cfg, p, in, sel)
	if err != nil {
		return ref.Frozen{}, err
	}
	if cfg.Causal != spec.CausalOff {
		if topk, ok := candidateSelection(c, cand, prefix+"targets"); ok {
			fz.TopK = topk
		}
	} else {
		fz.TopK = sel
	}
	return fz, nil
}

// MarshalJSON writes an infinite distance (no score to measure it by) as
// "inf".
func (f Flip) MarshalJSON() ([]byte, error) {
	type plain Flip
	return json.Marshal(struct {
		plain
		Distance any `json:"distance"`
	}{plain(f), jsonFloat(f.Distance)})
}
