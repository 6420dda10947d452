package mod_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// Tolerances of mod's MoDE layer against ref's, in the form and with the
// scale of the layer tolerances above. Measured over 3000 drawn cases of
// TestMoDEMatchesRef (go test ./mod -run TestMoDEMatchesRef -rapid.checks
// 3000 -measure -v, 2026-11-23, docs/tolerances.md), with a margin of about
// 3x:
//
//	MoDE forward    1.7e-6 (the gates; out 4.4e-7)  -> 5e-6
//	MoDE gradient   7.1e-6 (x; the parameters 4.3e-6) -> 2e-5
var (
	modeForwardTol = tol{scale: 5e-6}
	modeGradTol    = tol{scale: 2e-5}
)

// modeCase is a drawn MoDE layer with ref's parameters, input and upstream
// gradient, all rounded to float32.
type modeCase struct {
	cfg      spec.MoDEConfig
	p        *ref.MoDEParams
	x        []*mat.Dense
	u        []float64
	batch, s int
}

func drawMoDECase(t *rapid.T) modeCase {
	cfg := spec.MoDEConfig{Block: drawBlock(t, 4), Experts: rapid.IntRange(1, 3).Draw(t, "experts"),
		ExpertCapacity: rapid.SampledFrom([]float64{0.125, 0.25, 0.29, 0.5, 0.75, 1}).Draw(t, "expert_capacity")}
	if rapid.Bool().Draw(t, "staged") {
		cfg.Form, cfg.Capacity = spec.MoDEStaged, rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(t, "capacity")
	} else {
		cfg.Form, cfg.NoOpExperts = spec.MoDEIntegrated, rapid.IntRange(1, 2).Draw(t, "noop_experts")
	}
	c := modeCase{cfg: cfg, batch: rapid.IntRange(1, 3).Draw(t, "B"), s: rapid.IntRange(3, 9).Draw(t, "S")}
	rng := ref.NewRand(rapid.Uint64().Draw(t, "seed"))
	c.p = ref.NewMoDEParams(cfg, rng)
	roundParams(c.p.Tensors(""))
	for range c.batch {
		x := ref.RandomMatrix(rng, c.s, cfg.Block.D, 1)
		round32(x.RawMatrix().Data)
		c.x = append(c.x, x)
	}
	c.u = flatBatch([]*mat.Dense{ref.RandomMatrix(rng, c.batch*c.s, cfg.Block.D, 1)})
	round32(c.u)
	return c
}

// modeFromRef returns a mod MoDE layer holding ref's parameters p.
func modeFromRef(tb reporter, cfg spec.MoDEConfig, p *ref.MoDEParams) *mod.MoDE {
	tb.Helper()
	m, err := mod.NewMoDE(cfg, rand.New(rand.NewPCG(0, 0)))
	if err != nil {
		tb.Fatal(err)
	}
	values := make(map[string][]float64)
	for _, t := range p.Tensors("") {
		values[t.Name] = t.Data
	}
	if err := mod.LoadParams(m.Params(""), values); err != nil {
		tb.Fatal(err)
	}
	return m
}

// modeDecisive reports whether ref's decisions, the MoD selection and every
// expert's choice, are at least selectionMargin from a flip.
func modeDecisive(res *ref.MoDEResult) bool {
	if res.RouterWeights != nil {
		k := make([]int, len(res.RouterWeights))
		for b := range k {
			k[b] = len(res.Selection.Rows[b])
		}
		if slices.Min(ref.BoundaryGaps(res.RouterWeights, k, nil)) < selectionMargin {
			return false
		}
	}
	for b, sel := range res.Selection.Rows {
		for e := range res.Gates[b][0] {
			col := make([]float64, len(sel))
			for t, i := range sel {
				col[t] = res.Gates[b][i][e]
			}
			if ref.BoundaryGaps([][]float64{col}, []int{res.ExpertCapacity[b]}, nil)[0] < selectionMargin {
				return false
			}
		}
	}
	return true
}

// refMoDEFrozen returns mod's decision as ref's.
func refMoDEFrozen(s int, fz mod.MoDEFrozen) ref.MoDEFrozen {
	out := ref.MoDEFrozen{Selection: refSelection(s, fz.Selected)}
	for _, row := range fz.Experts {
		var ch [][]int
		for _, c := range row {
			ch = append(ch, append([]int{}, c...))
		}
		out.Experts = append(out.Experts, ch)
	}
	return out
}

// checkMoDEAgainstRef runs mod's MoDE layer and compares its decision,
// output, gates, FLOPs and every gradient with ref's at mod's decision.
func checkMoDEAgainstRef(t reporter, c modeCase) {
	m := modeFromRef(t, c.cfg, c.p)
	var tp autograd.Tape
	x := autograd.NewParam(c.batch*c.s, c.cfg.Block.D, to32(flatBatch(c.x)))
	res, err := m.Forward(&tp, x, c.batch, c.s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.MoDEForward(c.cfg, c.p, c.x)
	if err != nil {
		t.Fatal(err)
	}
	if modeDecisive(want) {
		for b := range c.batch {
			if !slices.Equal(res.Frozen.Selected[b], want.Selection.Rows[b]) {
				t.Fatalf("row %d: mod selected %v, ref %v", b, res.Frozen.Selected[b], want.Selection.Rows[b])
			}
			for e := range want.Experts[b] {
				if !slices.Equal(res.Frozen.Experts[b][e], want.Experts[b][e]) {
					t.Fatalf("row %d expert %d: mod chose %v, ref %v", b, e, res.Frozen.Experts[b][e], want.Experts[b][e])
				}
			}
		}
	}
	fz := refMoDEFrozen(c.s, res.Frozen)
	want, err = ref.MoDEForwardFrozen(c.cfg, c.p, c.x, fz)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "MoDE forward", "out", res.Out.Data, flatBatch(want.Out), nil, modeForwardTol)
	var gates []float64
	for _, row := range want.Gates {
		for _, g := range row {
			gates = append(gates, g...)
		}
	}
	compare(t, "MoDE forward", "gates", res.Gates, gates, nil, modeForwardTol)
	if want.RouterWeights != nil {
		compare(t, "MoDE forward", "router logits", res.RouterLogits, flatField(want.RouterWeights), nil, modeForwardTol)
	}
	if res.FLOPs != mod.LayerFLOPs(want.FLOPs) {
		t.Errorf("FLOPs %+v, ref %+v", res.FLOPs, want.FLOPs)
	}
	if !slices.Equal(res.ExpertCapacity, want.ExpertCapacity) {
		t.Errorf("expert capacity %v, ref %v", res.ExpertCapacity, want.ExpertCapacity)
	}
	var tpf autograd.Tape
	resf, err := m.ForwardFrozen(&tpf, autograd.New(x.Rows, x.Cols, x.Data), c.batch, c.s, res.Frozen)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resf.Out.Data, res.Out.Data) {
		t.Errorf("the frozen forward of the forward's own decision differs from it")
	}

	tp.Backward(tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, to32(c.u)))))
	refLoss := func() (float64, error) {
		r, err := ref.MoDEForwardFrozen(c.cfg, c.p, c.x, fz)
		if err != nil {
			return 0, err
		}
		return dot(r.Out, c.u), nil
	}
	rng := rand.New(rand.NewPCG(1, 1))
	off := 0
	for _, xb := range c.x {
		data := xb.RawMatrix().Data
		fdCompare(t, "MoDE gradient", "grad x", x.Grad[off:off+len(data)], data, refLoss, 0, rng, modeGradTol)
		off += len(data)
	}
	mp := m.Params("")
	for i, pt := range c.p.Tensors("") {
		if mp[i].Name != pt.Name {
			t.Fatalf("parameter %d is %s in mod, %s in ref", i, mp[i].Name, pt.Name)
		}
		fdCompare(t, "MoDE gradient", "grad "+pt.Name, mp[i].T.Grad, pt.Data, refLoss, 0, rng, modeGradTol)
	}
}

// TestMoDEMatchesRef draws staged and integrated MoDE layers over 1 to 3
// experts, 1 or 2 no-op experts, every capacity, norm, MLP and window, and
// checks mod's decision, forward and every gradient against ref.
func TestMoDEMatchesRef(t *testing.T) {
	rapidChecks(40)
	rapid.Check(t, func(t *rapid.T) { checkMoDEAgainstRef(t, drawMoDECase(t)) })
}

// TestMoDEErrors checks that a bad input or decision is an error naming it.
func TestMoDEErrors(t *testing.T) {
	cfg := spec.MoDEConfig{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.5}
	m, err := mod.NewMoDE(cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	if _, err := m.Forward(&tp, autograd.New(4, 8, nil), 1, 5); err == nil {
		t.Error("X of 4 rows for B·S = 5 gave no error")
	}
	x := autograd.New(4, 8, nil)
	for i := range x.Data {
		x.Data[i] = float32(math.Sin(float64(i)))
	}
	res, err := m.Forward(&tp, x, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	fz := res.Frozen
	fz.Experts = [][][]int{{{0, 1}, {3, 2}, {0, 1}}}
	if _, err := m.ForwardFrozen(&tp, x, 1, 4, fz); err == nil {
		t.Error("an expert choice out of order gave no error")
	}
	fz.Selected = [][]int{{0, 1, 2}}
	if _, err := m.ForwardFrozen(&tp, x, 1, 4, fz); err == nil {
		t.Error("an integrated selection of 3 of 4 positions gave no error")
	}
	if _, err := mod.NewMoDE(spec.MoDEConfig{Block: cfg.Block, Form: spec.MoDEStaged, Experts: 1, ExpertCapacity: 0.5}, rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Error("a staged layer without a capacity gave no error")
	}
}
