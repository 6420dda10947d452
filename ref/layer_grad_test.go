package ref

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// drawLayerConfig draws a routed layer's configuration: every router,
// weighting, compute, auxiliary loss and causal mode that Validate accepts,
// with jitter, load balancing and MLP-only routing, on drawBlockConfig's
// block.
func drawLayerConfig(t *rapid.T) spec.Config {
	c := spec.DefaultConfig(drawBlockConfig(t), rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(t, "capacity"))
	c.Router = rapid.SampledFrom([]spec.RouterKind{spec.RouterLinear, spec.RouterLinearBias, spec.RouterL2Norm, spec.RouterRandom}).Draw(t, "router")
	c.Weighting = rapid.SampledFrom([]spec.Weighting{spec.WeightRaw, spec.WeightSigmoid, spec.WeightNone, spec.WeightSoftmax}).Draw(t, "weighting")
	c.Causal = rapid.SampledFrom([]spec.CausalRouting{spec.CausalOff, spec.CausalOff, spec.CausalRouter, spec.CausalPredictor}).Draw(t, "causal")
	if c.Causal == spec.CausalOff && rapid.Bool().Draw(t, "dense") {
		c.Compute = spec.ComputeDense
	}
	if c.Causal != spec.CausalOff && c.Weighting == spec.WeightSoftmax {
		c.Weighting = spec.WeightSigmoid
	}
	c.MLPOnly = rapid.IntRange(0, 3).Draw(t, "mlponly") == 0
	c.Aux = rapid.SampledFrom([]spec.AuxObjective{spec.AuxNone, spec.AuxRouterBCE, spec.AuxPredictor}).Draw(t, "aux")
	if c.Aux != spec.AuxNone {
		c.AuxWeight = rapid.Float64Range(0.05, 1).Draw(t, "auxweight")
	}
	if rapid.Bool().Draw(t, "loadbalance") {
		c.LoadBalanceWeight = rapid.Float64Range(0.01, 1).Draw(t, "lbweight")
	}
	if rapid.Bool().Draw(t, "jitter") {
		c.Jitter = 0.1
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("drawn configuration: %v", err)
	}
	return c
}

// drawLayerInputs draws B rows of S tokens with valid lengths, the random
// router's noise and the jitter where the configuration needs them.
func drawLayerInputs(t *rapid.T, c spec.Config) LayerInputs {
	rows := rapid.IntRange(1, 3).Draw(t, "B")
	s := rapid.IntRange(1, 10).Draw(t, "S")
	rng := NewRand(rapid.Uint64().Draw(t, "xseed"))
	var in LayerInputs
	for range rows {
		in.X = append(in.X, RandomMatrix(rng, s, c.Block.D, 1))
	}
	if rapid.Bool().Draw(t, "padded") {
		for range rows {
			in.Valid = append(in.Valid, rapid.IntRange(1, s).Draw(t, "valid"))
		}
	}
	if c.Router == spec.RouterRandom {
		in.Noise = RandomField(rng, rows, s)
	}
	if c.Jitter > 0 {
		in.Jitter = RandomField(rng, rows, s)
	}
	return in
}

// sameTensorBits fails t unless got and want hold the same bits.
func sameTensorBits(t *rapid.T, what string, got, want []Tensor) {
	for k := range want {
		for i, v := range want[k].Data {
			if math.Float64bits(got[k].Data[i]) != math.Float64bits(v) {
				t.Fatalf("%s: %s[%d] = %v, two-step %v", what, want[k].Name, i, got[k].Data[i], v)
			}
		}
	}
}

// TestLayerGradientsAreTheFiniteDifferences checks LayerGradients, every
// parameter's gradient and the input's, against central differences of
// L = Σ U⊙out + AuxLoss of LayerForwardFrozen with the decision of
// LayerForward frozen, on drawn configurations (drawLayerConfig) and
// inputs with padding; U is zero at padded positions, as in the corpus.
// LayerForwardGradients must give LayerGradients' bits.
func TestLayerGradientsAreTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		c := drawLayerConfig(t)
		p := NewLayerParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
		in := drawLayerInputs(t, c)
		rng := NewRand(rapid.Uint64().Draw(t, "useed"))
		s, _ := in.X[0].Dims()
		var u []*mat.Dense
		for b := range in.X {
			ub := RandomMatrix(rng, s, c.Block.D, 1)
			for i := validLen(in.Valid, b, s); i < s; i++ {
				ub.SetRow(i, make([]float64, c.Block.D))
			}
			u = append(u, ub)
		}
		res, err := LayerForward(c, p, in)
		if err != nil {
			t.Fatal(err)
		}
		fz := res.Frozen
		loss := func() (float64, error) {
			r, err := LayerForwardFrozen(c, p, in, fz)
			if err != nil {
				return 0, err
			}
			l := r.AuxLoss
			for b := range u {
				l += dotRows(r.Out[b].RawMatrix().Data, u[b].RawMatrix().Data)
			}
			return l, nil
		}
		_, g, err := LayerGradients(c, p, in, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		_, g1, err := LayerForwardGradients(c, p, in, u)
		if err != nil {
			t.Fatal(err)
		}
		sameTensorBits(t, "LayerForwardGradients", g1.Params.Tensors(""), g.Params.Tensors(""))
		for b, xb := range in.X {
			e.compare(t, "X", g.X[b].RawMatrix().Data, loss, xb.RawMatrix().Data)
		}
		gts := g.Params.Tensors("")
		pts := p.Tensors("")
		if len(gts) != len(pts) {
			t.Fatalf("%d gradient tensors for %d parameters", len(gts), len(pts))
		}
		for k, pt := range pts {
			e.compare(t, pt.Name, gts[k].Data, loss, pt.Data)
		}
	})
	e.report(t)
}

// TestGradientsDoNotDependOnGOMAXPROCS runs LayerForwardGradients on a
// layer large enough for the products' row tasks and attention's heads to
// go to several goroutines, with GOMAXPROCS 1, 2 and 3, with 4 key and
// value heads and with 2 (grouped-query attention, whose groups' query heads
// add into one key head's gradient): the output and every gradient must be
// the same bits.
func TestGradientsDoNotDependOnGOMAXPROCS(t *testing.T) {
	for _, kv := range []int{0, 2} {
		gradientsOnProcs(t, kv)
	}
}

// gradientsOnProcs is TestGradientsDoNotDependOnGOMAXPROCS with kv key
// and value heads.
func gradientsOnProcs(t *testing.T, kv int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(32, 4, 64), 0.5)
	cfg.Block.Window, cfg.Block.KVHeads = 50, kv
	p := NewLayerParams(cfg, NewRand(3))
	rng := NewRand(4)
	var in LayerInputs
	var u []*mat.Dense
	for range 2 {
		in.X = append(in.X, RandomMatrix(rng, 300, 32, 1))
		u = append(u, RandomMatrix(rng, 300, 32, 1))
	}
	var want []Tensor
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		res, g, err := LayerForwardGradients(cfg, p, in, u)
		if err != nil {
			t.Fatal(err)
		}
		got := append(g.Params.Tensors(""), Tensor{Name: "X", Data: append(rawRows(g.X[0]), rawRows(g.X[1])...)},
			Tensor{Name: "out", Data: append(rawRows(res.Out[0]), rawRows(res.Out[1])...)})
		if want == nil {
			want = got
			continue
		}
		for k := range want {
			for i, v := range want[k].Data {
				if math.Float64bits(got[k].Data[i]) != math.Float64bits(v) {
					t.Fatalf("kv_heads %d, GOMAXPROCS %d: %s[%d] = %v, with GOMAXPROCS 1 %v", kv, procs, want[k].Name, i, got[k].Data[i], v)
				}
			}
		}
	}
}

// TestLayerBackwardOfPartsIsTheFiniteDifferences checks LayerBackward
// against central differences of
// L = Σ Ub⊙base + Σ Uf⊙f + Σ um·mult + Σ uw·g + Σ ur·r + AuxLoss,
// base = out − mult·f, for drawn gradients of the parts (um drawn at every
// position: mult is the constant 0 where f is not computed; uw and ur, the
// sums over valid positions, drawn or nil), with the decision of
// LayerForward frozen and AuxLoss as AuxLosses computes it with the valid
// lengths, or, when drawn, over every position; where the predictor's loss
// counts, its input is X itself (the stop-gradient removed) and the
// gradient reaching X is X's plus PredictorInput's; and where the router
// is drawn to read X as RouterInput, plus RouterInput's.
func TestLayerBackwardOfPartsIsTheFiniteDifferences(t *testing.T) {
	var e gradErr
	rapid.Check(t, func(t *rapid.T) {
		c := drawLayerConfig(t)
		p := NewLayerParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
		in := drawLayerInputs(t, c)
		rng := NewRand(rapid.Uint64().Draw(t, "useed"))
		s, _ := in.X[0].Dims()
		var pg LayerPartGrads
		for range in.X {
			pg.Base = append(pg.Base, RandomMatrix(rng, s, c.Block.D, 1))
			pg.Update = append(pg.Update, RandomMatrix(rng, s, c.Block.D, 1))
			pg.Mult = append(pg.Mult, RandomField(rng, 1, s)[0])
		}
		if rapid.Bool().Draw(t, "weights") {
			pg.Weights = RandomField(rng, len(in.X), s)
		}
		if rapid.Bool().Draw(t, "router") {
			pg.Router = RandomField(rng, len(in.X), s)
		}
		if rapid.Bool().Draw(t, "routerInput") {
			pg.RouterInput = in.X // the router reads X, given as another tensor
		}
		auxAll := rapid.Bool().Draw(t, "auxOverEveryPosition")
		aux := func(r *LayerResult) {
			if auxAll {
				AuxLosses(c, r, r.Selection.Mask(), nil)
			}
		}
		res, err := LayerForward(c, p, in)
		if err != nil {
			t.Fatal(err)
		}
		fz := res.Frozen
		live := c.Aux == spec.AuxPredictor
		if live {
			fz.PredictorInput = in.X
		}
		loss := func() (float64, error) {
			r, err := LayerForwardFrozen(c, p, in, fz)
			if err != nil {
				return 0, err
			}
			aux(r)
			l := r.AuxLoss
			for b := range in.X {
				for i := 0; i < validLen(in.Valid, b, s); i++ {
					if pg.Weights != nil {
						l += float64(r.Weights[b][i] * pg.Weights[b][i])
					}
					if pg.Router != nil {
						l += float64(r.RouterWeights[b][i] * pg.Router[b][i])
					}
				}
				for i := 0; i < s; i++ {
					out, f, m := r.Out[b].RawRowView(i), r.Update[b].RawRowView(i), r.Multipliers[b][i]
					base := make([]float64, len(out))
					for j := range out {
						base[j] = out[j] - float64(m*f[j])
					}
					l += dotRows(base, pg.Base[b].RawRowView(i)) + dotRows(f, pg.Update[b].RawRowView(i)) + float64(m*pg.Mult[b][i])
				}
			}
			return l, nil
		}
		kept, err := LayerForwardKept(c, p, in, fz)
		if err != nil {
			t.Fatal(err)
		}
		aux(kept)
		g, err := LayerBackward(c, p, in, kept, pg)
		if err != nil {
			t.Fatal(err)
		}
		for b, xb := range in.X {
			dx := mat.DenseCopyOf(g.X[b])
			if live {
				dx.Add(dx, g.PredictorInput[b])
			}
			if pg.RouterInput != nil {
				dx.Add(dx, g.RouterInput[b])
			}
			e.compare(t, "X", dx.RawMatrix().Data, loss, xb.RawMatrix().Data)
		}
		gts := g.Params.Tensors("")
		for k, pt := range p.Tensors("") {
			e.compare(t, pt.Name, gts[k].Data, loss, pt.Data)
		}
	})
	e.report(t)
}

// TestLayerBackwardChecksPartShapes checks that LayerBackward refuses
// gradients of the weights or of the router weights that are not B×S,
// naming which.
func TestLayerBackwardChecksPartShapes(t *testing.T) {
	c := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.5)
	p := NewLayerParams(c, NewRand(1))
	rng := NewRand(2)
	in := LayerInputs{X: []*mat.Dense{RandomMatrix(rng, 4, 8, 1), RandomMatrix(rng, 4, 8, 1)}}
	res, err := LayerForward(c, p, in)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := LayerForwardKept(c, p, in, res.Frozen)
	if err != nil {
		t.Fatal(err)
	}
	parts := func() LayerPartGrads {
		return LayerPartGrads{Base: in.X, Mult: RandomField(rng, 2, 4)}
	}
	if _, err := LayerBackward(c, p, in, kept, parts()); err != nil {
		t.Fatalf("well-shaped parts: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  func(*LayerPartGrads)
	}{
		{"weights' gradient", func(pg *LayerPartGrads) { pg.Weights = RandomField(rng, 2, 3) }},
		{"router weights' gradient", func(pg *LayerPartGrads) { pg.Router = RandomField(rng, 1, 4) }},
	} {
		pg := parts()
		tc.set(&pg)
		if _, err := LayerBackward(c, p, in, kept, pg); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s misshaped: error %v, want one naming it", tc.name, err)
		}
	}
}
