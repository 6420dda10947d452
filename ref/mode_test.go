package ref

import (
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/spec"
)

// modeCase draws a MoDE layer and a batch of B rows of S tokens.
func modeCase(cfg spec.MoDEConfig, batch, s int, seed uint64) (*MoDEParams, []*mat.Dense) {
	rng := NewRand(seed)
	p := NewMoDEParams(cfg, rng)
	var x []*mat.Dense
	for range batch {
		x = append(x, RandomMatrix(rng, s, cfg.Block.D, 1))
	}
	return p, x
}

func TestExpertCapacity(t *testing.T) {
	for _, tc := range []struct {
		ce   float64
		n, k int
	}{{0.29, 100, 29}, {0.5, 8, 4}, {0.1, 5, 1}, {1, 7, 7}, {0.35, 8, 2}, {0.5, 0, 0}} {
		if k := ExpertCapacity(tc.ce, tc.n); k != tc.k {
			t.Errorf("ExpertCapacity(%v, %d) = %d, want %d", tc.ce, tc.n, k, tc.k)
		}
	}
}

// TestExpertChoiceHand checks expert choice on gates worked out by hand:
// each expert takes its k largest, ties to the lower token, ascending.
func TestExpertChoiceHand(t *testing.T) {
	gates := [][]float64{
		{0.5, 0.2, 0.3},
		{0.1, 0.6, 0.3},
		{0.5, 0.1, 0.4},
		{0.2, 0.6, 0.2},
	}
	got, err := ExpertChoice(gates, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Expert 0: 0.5 at tokens 0 and 2. Expert 1: 0.6 at 1 and 3. Expert 2:
	// 0.4 at 2, then 0.3 at tokens 0 and 1: the lower one wins.
	want := [][]int{{0, 2}, {1, 3}, {0, 2}}
	for e := range want {
		if !slices.Equal(got[e], want[e]) {
			t.Errorf("expert %d chose %v, want %v", e, got[e], want[e])
		}
	}
	gates[3][1] = gates[3][1] * 0 / 0
	if _, err := ExpertChoice(gates, 2); err == nil {
		t.Error("a NaN gate gave no error")
	}
}

// TestMoDEStagedOneExpertIsMoD: with one expert of capacity 1 the gate is
// softmax of one logit, exactly 1, and the expert takes every gathered
// token, so the staged layer is the paper's MoD layer (Eq. 1) with that
// expert as its MLP, bit for bit.
func TestMoDEStagedOneExpertIsMoD(t *testing.T) {
	cfg := spec.MoDEConfig{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEStaged, Experts: 1, Capacity: 0.5, ExpertCapacity: 1}
	p, x := modeCase(cfg, 2, 8, 3)
	res, err := MoDEForward(cfg, p, x)
	if err != nil {
		t.Fatal(err)
	}
	lc := spec.DefaultConfig(cfg.Block, 0.5)
	lp := &LayerParams{Block: p.Block, Router: p.Router}
	lp.Block.W1, lp.Block.W2 = p.Experts[0].W1, p.Experts[0].W2
	want, err := LayerForward(lc, lp, LayerInputs{X: x})
	if err != nil {
		t.Fatal(err)
	}
	for b := range x {
		if !slices.Equal(res.Selection.Rows[b], want.Selection.Rows[b]) {
			t.Errorf("row %d: selection %v, MoD's %v", b, res.Selection.Rows[b], want.Selection.Rows[b])
		}
		if !slices.Equal(res.Experts[b][0], want.Selection.Rows[b]) {
			t.Errorf("row %d: the expert chose %v, want every gathered token %v", b, res.Experts[b][0], want.Selection.Rows[b])
		}
		assertClose(t, "out", res.Out[b].RawMatrix().Data, want.Out[b].RawMatrix().Data, 0)
		for _, i := range want.Selection.Rows[b] {
			if res.Gates[b][i][0] != 1 {
				t.Errorf("row %d position %d: gate %v, want 1", b, i, res.Gates[b][i][0])
			}
		}
	}
	f := want.FLOPs
	f.Router += GateFLOPs(8, 1, 2*4)
	f.Total += GateFLOPs(8, 1, 2*4)
	if res.FLOPs != f {
		t.Errorf("FLOPs %+v, want MoD's plus the gate, %+v", res.FLOPs, f)
	}
}

// TestMoDEIntegratedTokens checks the integrated form token by token: every
// expert, the no-op one included, takes k_e tokens; a token gets
// G_ie·MLP_e(u_i) from each conventional expert that chose it and nothing
// else beyond attention.
func TestMoDEIntegratedTokens(t *testing.T) {
	cfg := spec.MoDEConfig{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.375}
	cfg.Block.MLP = spec.ActSwiGLU
	p, x := modeCase(cfg, 2, 8, 5)
	res, err := MoDEForward(cfg, p, x)
	if err != nil {
		t.Fatal(err)
	}
	for b := range x {
		if res.ExpertCapacity[b] != 3 {
			t.Errorf("row %d: k_e = %d, want floor(0.375·8) = 3", b, res.ExpertCapacity[b])
		}
		a, err := AttentionUpdate(cfg.Block, &p.Block, x[b], iota(8))
		if err != nil {
			t.Fatal(err)
		}
		for e, c := range res.Experts[b] {
			if len(c) != 3 {
				t.Errorf("row %d expert %d chose %v, want 3 tokens", b, e, c)
			}
		}
		for i := range 8 {
			h := make([]float64, 8)
			for j := range h {
				h[j] = x[b].At(i, j) + a.At(i, j)
			}
			u := normalize(cfg.Block, p.Block.Norm2, p.Block.Norm2Bias, h)
			g := Softmax(vecMat(u, p.Gate))
			assertClose(t, "gates", res.Gates[b][i], g, 1e-15)
			want := append([]float64(nil), h...)
			for e := range cfg.Experts {
				if slices.Contains(res.Experts[b][e], i) {
					y := MLP(cfg.Block, &p.Experts[e], u)
					for j := range want {
						want[j] += g[e] * y[j]
					}
				}
			}
			assertClose(t, "out", res.Out[b].RawRowView(i), want, 1e-14)
		}
	}
}

// TestMoDEFrozenReplay checks that replaying a forward's own decision gives
// its output bit for bit, and that a decision of the wrong shape is an
// error.
func TestMoDEFrozenReplay(t *testing.T) {
	for _, cfg := range []spec.MoDEConfig{
		{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEStaged, Experts: 3, Capacity: 0.5, ExpertCapacity: 0.5},
		{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 2, ExpertCapacity: 0.25},
	} {
		p, x := modeCase(cfg, 2, 8, 7)
		res, err := MoDEForward(cfg, p, x)
		if err != nil {
			t.Fatal(err)
		}
		again, err := MoDEForwardFrozen(cfg, p, x, res.Frozen)
		if err != nil {
			t.Fatal(err)
		}
		for b := range x {
			assertClose(t, string(cfg.Form)+" replay", again.Out[b].RawMatrix().Data, res.Out[b].RawMatrix().Data, 0)
		}
		bad := res.Frozen
		bad.Experts = bad.Experts[:1]
		if _, err := MoDEForwardFrozen(cfg, p, x, bad); err == nil {
			t.Errorf("%s: a frozen choice of one row gave no error", cfg.Form)
		}
	}
}

// TestMoDERouteIsMoDEForwards: the parameters NewMoDERoutingParams draws
// are NewMoDEParams' but for the experts (left out), it leaves the
// generator where NewMoDEParams does (the inputs drawn next are the same
// bits), and MoDERoute on them decides what MoDEForward on the whole draw
// decides: the same router weights, selection, gates, expert capacities
// and expert choice, bit for bit, in both forms, GELU and SwiGLU experts.
func TestMoDERouteIsMoDEForwards(t *testing.T) {
	swiglu := spec.DefaultBlockConfig(16, 2, 24)
	swiglu.MLP, swiglu.Norm = spec.ActSwiGLU, spec.NormRMS
	for _, cfg := range []spec.MoDEConfig{
		{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEStaged, Experts: 3, Capacity: 0.5, ExpertCapacity: 0.5},
		{Block: swiglu, Form: spec.MoDEStaged, Experts: 2, Capacity: 0.75, ExpertCapacity: 0.25},
		{Block: spec.DefaultBlockConfig(8, 2, 16), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 2, ExpertCapacity: 0.25},
		{Block: swiglu, Form: spec.MoDEIntegrated, Experts: 4, NoOpExperts: 1, ExpertCapacity: 0.5},
	} {
		for seed := range uint64(5) {
			p, x := modeCase(cfg, 2, 12, seed)
			rng := NewRand(seed)
			q := NewMoDERoutingParams(cfg, rng)
			var y []*mat.Dense
			for range 2 {
				y = append(y, RandomMatrix(rng, 12, cfg.Block.D, 1))
			}
			for b := range x {
				assertClose(t, string(cfg.Form)+" input after the routing draw", y[b].RawMatrix().Data, x[b].RawMatrix().Data, 0)
			}
			if q.Experts != nil {
				t.Errorf("%s: the routing draw has experts", cfg.Form)
			}
			pt, qt := p.Tensors(""), q.Tensors("")
			if n := len(pt) - cfg.Experts*len(p.Experts[0].Tensors("")); len(qt) != n {
				t.Fatalf("%s: %d tensors drawn for the routing, want the %d of the layer's besides its experts", cfg.Form, len(qt), n)
			}
			for i, tq := range qt {
				if pt[i].Name != tq.Name || strings.HasPrefix(tq.Name, "Expert") {
					t.Fatalf("%s: tensor %d of the routing draw is %s, the layer's %s", cfg.Form, i, tq.Name, pt[i].Name)
				}
				assertClose(t, string(cfg.Form)+" "+tq.Name, tq.Data, pt[i].Data, 0)
			}
			full, err := MoDEForward(cfg, p, x)
			if err != nil {
				t.Fatal(err)
			}
			route, err := MoDERoute(cfg, q, y)
			if err != nil {
				t.Fatal(err)
			}
			for b := range full.RouterWeights {
				assertClose(t, string(cfg.Form)+" router weights", route.RouterWeights[b], full.RouterWeights[b], 0)
			}
			if (route.RouterWeights == nil) != (full.RouterWeights == nil) {
				t.Errorf("%s: router weights %v, MoDEForward's %v", cfg.Form, route.RouterWeights, full.RouterWeights)
			}
			for b := range full.Gates {
				for i := range full.Gates[b] {
					assertClose(t, string(cfg.Form)+" gates", route.Gates[b][i], full.Gates[b][i], 0)
				}
			}
			if !slices.EqualFunc(route.Selection.Rows, full.Selection.Rows, slices.Equal) || !slices.Equal(route.ExpertCapacity, full.ExpertCapacity) ||
				!slices.EqualFunc(route.Experts, full.Experts, func(a, b [][]int) bool { return slices.EqualFunc(a, b, slices.Equal) }) {
				t.Errorf("%s seed %d: MoDERoute decides %v, %v (k_e %v); MoDEForward %v, %v (k_e %v)", cfg.Form, seed,
					route.Selection.Rows, route.Experts, route.ExpertCapacity, full.Selection.Rows, full.Experts, full.ExpertCapacity)
			}
		}
	}
}

// TestAttentionFLOPsWindow: with a window w each query counts min(n, w)
// keys, so 6 tokens with w = 4 cost 4·6·4·d in scores and values, and a
// window wider than the sequence changes nothing.
func TestAttentionFLOPsWindow(t *testing.T) {
	c := spec.DefaultBlockConfig(8, 2, 16)
	proj, full := AttentionFLOPs(c, 6)
	c.Window = 4
	proj4, win := AttentionFLOPs(c, 6)
	if proj4 != proj || win != 4*6*4*8 || full != 4*6*6*8 {
		t.Errorf("scores %d with w = 4 and %d without, projections %d and %d; want %d, %d and equal projections", win, full, proj4, proj, 4*6*4*8, 4*6*6*8)
	}
	c.Window = 10
	if _, wide := AttentionFLOPs(c, 6); wide != full {
		t.Errorf("w = 10 > n = 6: scores %d, want the full square's %d", wide, full)
	}
	// One key and value head of d_h = 4: Wk and Wv are 8×4, so the
	// projections cost 2·2·6·8·8 (Wq, Wo) + 2·2·6·8·4 (Wk, Wv); every
	// query head still scores every key.
	c.Window, c.KVHeads = 0, 1
	if gproj, gsc := AttentionFLOPs(c, 6); gproj != 4*6*8*8+4*6*8*4 || gsc != full {
		t.Errorf("kv_heads = 1: projections %d, scores %d; want %d and %d", gproj, gsc, 4*6*8*8+4*6*8*4, full)
	}
}
