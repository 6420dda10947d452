package modcase

import (
	"maps"
	"slices"
	"testing"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
	"github.com/modref/modref/golden/oracle"
)

// roundingTies returns layer-ties with, in every row, the router weight of
// the tied token the tie rule selects (the lower position) lowered by
// 1e-7 through its input: the float64 truth now selects the other one,
// while at bf16 the two inputs round alike, tie, and a correct bf16
// implementation keeps the lower position. It returns the case with its
// expected arrays recomputed by ref, and the positions the truth drops and
// takes per row.
func roundingTies(t *testing.T) (*format.Case, [][2]int) {
	t.Helper()
	c := load(t, "layer-ties")
	cfg := c.Manifest.Config
	d := cfg.Layer.Block.D
	x := c.Arrays["input.x"]
	w := c.Arrays["param.Router"].F
	r := c.Arrays["expected.router_logits"].F
	sel := c.Arrays["expected.selected"]
	ww := 0.0
	for _, v := range w {
		ww += v * v
	}
	nx := &format.Array{Shape: x.Shape, F: slices.Clone(x.F), DType: x.DType}
	var moved [][2]int
	for b := range cfg.Batch {
		row := sel.I[b*sel.Shape[1] : (b+1)*sel.Shape[1]]
		for _, p := range row {
			for q := int(p) + 1; q < cfg.SeqLen; q++ {
				if r[b*cfg.SeqLen+q] == r[b*cfg.SeqLen+int(p)] && !slices.Contains(row, int64(q)) {
					moved = append(moved, [2]int{int(p), q})
					for j := range d {
						nx.F[(b*cfg.SeqLen+int(p))*d+j] -= 1e-7 * w[j] / ww
					}
				}
			}
		}
	}
	if len(moved) != cfg.Batch {
		t.Fatalf("layer-ties: found the tied pairs %v, want one per row", moved)
	}
	nc := &format.Case{Manifest: c.Manifest, Arrays: maps.Clone(c.Arrays)}
	nc.Arrays["input.x"] = nx
	truth, err := oracle.RefCandidate(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range c.Manifest.Arrays {
		if info.Role == format.RoleExpected {
			nc.Arrays[info.Name] = truth[format.CandidateName(info.Name)]
		}
	}
	return nc, moved
}

// TestFlipsAtRoundingTies: a correct bf16 implementation (the bf16
// emulation) that breaks rounding ties by the lower position routes
// otherwise than the float64 truth; check rejudges it under its own
// decisions and passes it, reporting where and by how much. The same
// candidate with strict '>' against the k-th weight (capacity_off_by_one:
// it drops the tied token) fails, and so does a decisive flip.
func TestFlipsAtRoundingTies(t *testing.T) {
	c, moved := roundingTies(t)
	p, _ := format.ParseProfile("bf16")
	base, err := Emulate(c, p)
	if err != nil {
		t.Fatal(err)
	}
	jc, _, err := judge.Tolerances(p, c, base)
	if err != nil {
		t.Fatal(err)
	}
	judgeAt := func(cand map[string]*format.Array) *judge.CaseResult {
		t.Helper()
		res, err := judge.Compare(jc, cand, false)
		if err != nil {
			t.Fatal(err)
		}
		if res, err = judge.JudgeFlips(jc, cand, res, false); err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := judgeAt(base)
	if !res.Pass || res.Flips == nil || res.Flips.Verdict != judge.FlipsRejudged {
		t.Fatalf("the bf16 emulation: pass %v, flips %+v", res.Pass, res.Flips)
	}
	if f := res.Flips; f.Count != 2*len(moved) || len(f.Flips) != len(moved) || f.NearTies < f.Count {
		t.Errorf("flip report %+v, want %d flips in %d rows", f, 2*len(moved), len(moved))
	}
	for b, f := range res.Flips.Flips {
		if f.Row != b || !slices.Equal(f.OnlyCandidate, []int{moved[b][0]}) || !slices.Equal(f.OnlyOracle, []int{moved[b][1]}) ||
			!f.Within || f.Distance <= 0 || f.Distance > 1e-6 {
			t.Errorf("row %d: flip %+v, want %v kept and %v dropped by about 1e-7", b, f, moved[b][0], moved[b][1])
		}
	}

	// capacity_off_by_one at bf16: the token tied with the k-th is dropped.
	off := maps.Clone(base)
	s := base["selected"]
	dropped := &format.Array{Shape: s.Shape, I: slices.Clone(s.I), DType: s.DType}
	for b, m := range moved {
		k := slices.Index(dropped.I[b*s.Shape[1]:(b+1)*s.Shape[1]], int64(m[0]))
		dropped.I[b*s.Shape[1]+k] = -1
	}
	off["selected"] = dropped
	if res := judgeAt(off); res.Pass || res.Flips == nil || res.Flips.Verdict != judge.FlipsBeyond {
		t.Errorf("fewer tokens routed: pass %v, flips %+v; want a failure beyond the margin", res.Pass, res.Flips)
	}

	// A decisive flip: the first selected token of row 0 swapped for the
	// unselected token with the lowest weight.
	far := maps.Clone(base)
	swapped := &format.Array{Shape: s.Shape, I: slices.Clone(s.I), DType: s.DType}
	r := c.Arrays["expected.router_logits"].F[:c.Manifest.Config.SeqLen]
	low := 0
	for i := range r {
		if r[i] < r[low] {
			low = i
		}
	}
	swapped.I[0] = int64(low)
	slices.Sort(swapped.I[:s.Shape[1]])
	far["selected"] = swapped
	if res := judgeAt(far); res.Pass || res.Flips.Verdict != judge.FlipsBeyond {
		t.Errorf("a decisive flip: pass %v, flips %+v", res.Pass, res.Flips)
	}
}
