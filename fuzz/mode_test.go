package fuzz

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// modeImpl is an implementation of the MoDE layer (docs/spec.md §14) under
// invariant 25: its forward and its frozen forward, with results in ref's
// types (Out, Selection, Experts, ExpertCapacity, Frozen).
type modeImpl struct {
	name    string
	float32 bool
	forward func(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz *ref.MoDEFrozen) (*ref.MoDEResult, error)
}

// modeImpls are ref's MoDE and mod's.
var modeImpls = []modeImpl{
	{"ref", false, func(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz *ref.MoDEFrozen) (*ref.MoDEResult, error) {
		if fz == nil {
			return ref.MoDEForward(cfg, p, x)
		}
		return ref.MoDEForwardFrozen(cfg, p, x, *fz)
	}},
	{"mod", true, modMoDE},
}

// modMoDE runs mod.MoDE with ref's parameters (rounded to float32 by
// mod.LoadParams) on x rounded to float32, and widens the result.
func modMoDE(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz *ref.MoDEFrozen) (*ref.MoDEResult, error) {
	m, err := mod.NewMoDE(cfg, rand.New(rand.NewPCG(0, 0)))
	if err != nil {
		return nil, err
	}
	values := make(map[string][]float64)
	for _, t := range p.Tensors("") {
		values[t.Name] = t.Data
	}
	if err := mod.LoadParams(m.Params(""), values); err != nil {
		return nil, err
	}
	rows, s := len(x), x[0].RawMatrix().Rows
	var flat []float64
	for _, xb := range x {
		flat = append(flat, xb.RawMatrix().Data...)
	}
	var tp autograd.Tape
	xt := autograd.New(rows*s, cfg.Block.D, to32(flat))
	var res *mod.MoDEResult
	if fz == nil {
		res, err = m.Forward(&tp, xt, rows, s)
	} else {
		res, err = m.ForwardFrozen(&tp, xt, rows, s, mod.MoDEFrozen{Selected: fz.Selection.Rows, Experts: fz.Experts})
	}
	if err != nil {
		return nil, err
	}
	out := &ref.MoDEResult{ExpertCapacity: res.ExpertCapacity, Experts: res.Frozen.Experts,
		Selection: ref.Selection{S: s, Rows: res.Frozen.Selected}}
	out.Frozen = ref.MoDEFrozen{Selection: out.Selection, Experts: out.Experts}
	d := cfg.Block.D
	for b := range rows {
		out.Out = append(out.Out, mat.NewDense(s, d, widen(res.Out.Data[b*s*d:(b+1)*s*d])))
	}
	return out, nil
}

var modeCount struct{ noExpert, severalExperts, skipped atomic.Int64 }

// modeProp is invariant 25 (docs/fuzzing.md): in a MoDE layer every expert
// takes exactly k_e tokens among those that reach it, and the staged router
// exactly k; every token gets exactly the updates of the experts that chose
// it: with every expert's W2 zeroed but e's, a token e did not choose comes
// out bit-identical to its output with every expert zeroed (and a token no
// conventional expert chose, to it with every expert live), while the
// experts' contributions add up; a token the staged router skipped comes
// out bit-identical to its input.
func modeProp(impl modeImpl) func(failer, Source) {
	return func(t failer, src Source) {
		cfg := spec.MoDEConfig{Block: spec.DefaultBlockConfig(4*src.Int(1, 2, "d/4"), src.Int(1, 2, "heads"), src.Int(1, 8, "dff")),
			Experts: src.Int(1, 3, "experts"), ExpertCapacity: src.Pick([]float64{0.125, 0.25, 0.29, 0.5, 0.75, 1}, "c_e")}
		if src.Int(0, 1, "swiglu") == 1 {
			cfg.Block.MLP = spec.ActSwiGLU
		}
		if src.Int(0, 1, "layernorm") == 1 {
			cfg.Block.Norm, cfg.Block.NormEps = spec.NormLayer, 1e-5
		}
		cfg.Block.Window = src.Int(0, 4, "window")
		if src.Int(0, 1, "staged") == 1 {
			cfg.Form, cfg.Capacity = spec.MoDEStaged, src.Pick([]float64{0.125, 0.25, 0.5, 0.75, 1}, "c")
		} else {
			cfg.Form, cfg.NoOpExperts = spec.MoDEIntegrated, src.Int(1, 2, "noop")
		}
		rows, s := src.Int(1, 3, "B"), src.Int(1, 8, "S")
		rng := ref.NewRand(src.Uint64("seed"))
		p := ref.NewMoDEParams(cfg, rng)
		scale := src.Pick([]float64{1, 1, 0.01, 100}, "scale")
		var x []*mat.Dense
		for range rows {
			xb := ref.RandomMatrix(rng, s, cfg.Block.D, scale)
			if impl.float32 {
				round32(xb.RawMatrix().Data)
			}
			x = append(x, xb)
		}
		if impl.float32 {
			roundParams(p.Tensors(""))
		}
		res, err := impl.forward(cfg, p, x, nil)
		if err != nil {
			t.Fatalf("%s: %v", impl.name, err)
		}
		k := s
		if cfg.Form == spec.MoDEStaged {
			k, _ = ref.CapacityFromRatio(cfg.Capacity, s)
		}
		ke := ref.ExpertCapacity(cfg.ExpertCapacity, k)
		for b := range rows {
			sel := res.Selection.Rows[b]
			if len(sel) != k || !slices.IsSorted(sel) {
				t.Fatalf("%s: row %d: selection %v, want %d ascending positions", impl.name, b, sel, k)
			}
			if res.ExpertCapacity[b] != ke || len(res.Experts[b]) != cfg.GateWidth() {
				t.Fatalf("%s: row %d: k_e = %d over %d experts, want %d over %d", impl.name, b, res.ExpertCapacity[b], len(res.Experts[b]), ke, cfg.GateWidth())
			}
			for e, c := range res.Experts[b] {
				if len(c) != ke || !slices.IsSorted(c) {
					t.Fatalf("%s: row %d expert %d chose %v, want k_e = %d ascending positions", impl.name, b, e, c, ke)
				}
				for j, i := range c {
					if !slices.Contains(sel, i) || (j > 0 && c[j-1] == i) {
						t.Fatalf("%s: row %d expert %d chose %v: position %d is repeated or did not reach the experts %v", impl.name, b, e, c, i, sel)
					}
				}
			}
			for i := range s {
				if slices.Contains(sel, i) {
					continue
				}
				modeCount.skipped.Add(1)
				for j := range cfg.Block.D {
					if res.Out[b].At(i, j) != x[b].At(i, j) {
						t.Fatalf("%s: row %d: skipped position %d changed: out[%d] = %v, x = %v", impl.name, b, i, j, res.Out[b].At(i, j), x[b].At(i, j))
					}
				}
			}
		}

		// Each expert alone, with the decision frozen: W2 = 0 silences an
		// expert exactly (G·0 = 0 and h + 0 = h).
		only := func(keep int) *ref.MoDEResult {
			q := ref.NewMoDEParams(cfg, ref.NewRand(0))
			for i, t := range p.Tensors("") {
				copy(q.Tensors("")[i].Data, t.Data)
			}
			for e := range q.Experts {
				if e != keep {
					q.Experts[e].W2.Zero()
				}
			}
			r, err := impl.forward(cfg, q, x, &res.Frozen)
			if err != nil {
				t.Fatalf("%s: frozen forward: %v", impl.name, err)
			}
			return r
		}
		none := only(-1)
		sum := make([][]float64, rows)
		for b := range rows {
			sum[b] = append([]float64(nil), none.Out[b].RawMatrix().Data...)
		}
		for e := range cfg.Experts {
			alone := only(e)
			for b := range rows {
				for i := range s {
					chose := slices.Contains(res.Experts[b][e], i)
					for j := range cfg.Block.D {
						got, base := alone.Out[b].At(i, j), none.Out[b].At(i, j)
						if !chose && got != base {
							t.Fatalf("%s: row %d position %d: expert %d did not choose it, yet alone it moves out[%d] from %v to %v", impl.name, b, i, e, j, base, got)
						}
						sum[b][i*cfg.Block.D+j] += got - base
					}
				}
			}
		}
		tol := 1e-12
		if impl.float32 {
			tol = 1e-5
		}
		for b := range rows {
			out := res.Out[b].RawMatrix().Data
			scaleB := 1.0
			for _, v := range out {
				scaleB = math.Max(scaleB, math.Abs(v))
			}
			for i := range s {
				chosen := 0
				for e := range cfg.Experts {
					if slices.Contains(res.Experts[b][e], i) {
						chosen++
					}
				}
				switch {
				case chosen == 0 && slices.Contains(res.Selection.Rows[b], i):
					modeCount.noExpert.Add(1)
				case chosen > 1:
					modeCount.severalExperts.Add(1)
				}
				for j := range cfg.Block.D {
					k := i*cfg.Block.D + j
					if chosen == 0 && out[k] != none.Out[b].RawMatrix().Data[k] {
						t.Fatalf("%s: row %d position %d: no expert chose it, yet out[%d] = %v differs from the all-silent %v", impl.name, b, i, j, out[k], none.Out[b].RawMatrix().Data[k])
					}
					if math.Abs(out[k]-sum[b][k]) > tol*scaleB {
						t.Fatalf("%s: row %d position %d: out[%d] = %v, but the experts alone add up to %v (difference %.3g, bound %.3g)", impl.name, b, i, j, out[k], sum[b][k], out[k]-sum[b][k], tol*scaleB)
					}
				}
			}
		}
	}
}

// TestMoDEExpertChoice is invariant 25 on ref and mod; it fails if the
// draws never produced a token no expert chose, one several experts chose,
// or a token the staged router skipped.
func TestMoDEExpertChoice(t *testing.T) {
	for _, impl := range modeImpls {
		t.Run(impl.name, func(t *testing.T) {
			for _, n := range []*atomic.Int64{&modeCount.noExpert, &modeCount.severalExperts, &modeCount.skipped} {
				n.Store(0)
			}
			check(t, modeProp(impl))
			for name, n := range map[string]int64{
				"tokens no expert chose":           modeCount.noExpert.Load(),
				"tokens several experts chose":     modeCount.severalExperts.Load(),
				"tokens the staged router skipped": modeCount.skipped.Load(),
			} {
				if n == 0 {
					t.Errorf("%s: no %s in 100 draws: the property was not exercised", impl.name, name)
				}
				t.Logf("%s: %s: %d", impl.name, name, n)
			}
		})
	}
}

// FuzzMoDE is invariant 25 as a native fuzz target, on ref and mod.
func FuzzMoDE(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, impl := range modeImpls {
			modeProp(impl)(t, &byteSource{data: data})
		}
	})
}

// leakyMoDE is ref's MoDE layer with a planted bug: expert 0's update
// reaches every token that reaches the experts, while the decision it
// reports is the true one (an expert applied to the whole row).
var leakyMoDE = modeImpl{"leaky", false, func(cfg spec.MoDEConfig, p *ref.MoDEParams, x []*mat.Dense, fz *ref.MoDEFrozen) (*ref.MoDEResult, error) {
	res, err := ref.MoDEForward(cfg, p, x)
	if err != nil {
		return nil, err
	}
	if fz == nil {
		fz = &res.Frozen
	}
	leak := ref.MoDEFrozen{Selection: fz.Selection}
	for b, row := range fz.Experts {
		leak.Experts = append(leak.Experts, append([][]int{fz.Selection.Rows[b]}, row[1:]...))
	}
	out, err := ref.MoDEForwardFrozen(cfg, p, x, leak)
	if err != nil {
		return nil, err
	}
	res.Out = out.Out
	return res, nil
}}

// TestMoDEPropertyCatchesLeak shows that invariant 25 fails for an expert
// whose update reaches tokens it did not choose.
func TestMoDEPropertyCatchesLeak(t *testing.T) {
	if err := failsSomewhere(modeProp(leakyMoDE), 50); err != nil {
		t.Fatalf("an expert applied to every token: %v; invariant 25 could not fail", err)
	}
}
