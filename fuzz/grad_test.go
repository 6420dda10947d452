package fuzz

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// steBuild builds the straight-through weight from g (a parameter) and the
// 0/1 mask m on a tape.
type steBuild func(tp *autograd.Tape, g, m *autograd.Tensor) *autograd.Tensor

// steSPEC is docs/spec.md §7: w = g + sg(m g - g).
func steSPEC(tp *autograd.Tape, g, m *autograd.Tensor) *autograd.Tensor {
	return tp.Add(g, tp.StopGradient(tp.Sub(tp.Mul(m, g), g)))
}

// steWild is the deviation of docs/spec.md §11: w = g m + (g - sg(g)),
// whose derivative is m + 1.
func steWild(tp *autograd.Tape, g, m *autograd.Tensor) *autograd.Tensor {
	return tp.Add(tp.Mul(g, m), tp.Sub(g, tp.StopGradient(g)))
}

var stePalette = []float64{1, -1, 0.5, -3.25, 0, math.Copysign(0, -1), 1e-30, -1e30, 3e38, -3e38, 1e-45, 7}

// steProp is docs/spec.md §7: the forward weight is m g exactly and its
// derivative with respect to g is exactly 1 for every token, selected or
// not (autograd); ref's StraightThroughWeights with a frozen offset has
// finite-difference derivative 1 too.
func steProp(build steBuild) func(failer, Source) {
	return func(t failer, src Source) {
		n := src.Int(1, 40, "tokens")
		g, m, u := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(src.Pick(stePalette, "g"))
			m[i] = float32(src.Int(0, 1, "m"))
			u[i] = float32(src.Pick([]float64{1, -2, 0.25, 3}, "upstream"))
		}
		gp := autograd.NewParam(n, 1, append([]float32(nil), g...))
		var tp autograd.Tape
		w := build(&tp, gp, autograd.New(n, 1, m))
		tp.BackwardFrom(w, u)
		for i := range g {
			if w.Data[i] != m[i]*g[i] {
				t.Fatalf("straight-through forward: token %d (m = %v, g = %v): w = %v, want m g = %v", i, m[i], g[i], w.Data[i], m[i]*g[i])
			}
			if gp.Grad[i] != u[i] {
				t.Fatalf("straight-through backward: token %d (m = %v, g = %v): dL/dg = %v for upstream %v, want exactly the upstream (dw/dg = 1)", i, m[i], g[i], gp.Grad[i], u[i])
			}
		}
		// ref: the frozen offset makes w linear in g with slope 1.
		g64 := [][]float64{make([]float64, n)}
		m64 := [][]float64{make([]float64, n)}
		for i := range g {
			g64[0][i] = src.Pick([]float64{1, -1, 0.5, 3, -7}, "g64")
			m64[0][i] = float64(m[i])
		}
		off := ref.StraightThroughOffsets(g64, m64)
		i := src.Int(0, n-1, "token")
		d, err := ref.FDDerivative(func() (float64, error) {
			return ref.StraightThroughWeights(g64, off)[0][i], nil
		}, g64[0], i, 0)
		if err != nil || math.Abs(d-1) > 1e-9 {
			t.Fatalf("ref straight-through: dw/dg at token %d (m = %v) = %v (err %v), want 1", i, m64[0][i], d, err)
		}
	}
}

func TestStraightThroughDerivativeIsOne(t *testing.T) {
	check(t, steProp(steSPEC))
	// The property tells the deviation apart: w = g m + (g - sg(g)) has
	// derivative m + 1.
	if err := failsSomewhere(steProp(steWild), 200); err != nil {
		t.Fatalf("the straight-through property accepts the m+1 deviation: %v", err)
	}
}

func FuzzStraightThrough(f *testing.F) { f.Fuzz(fuzzBytes(steProp(steSPEC))) }

// fatal is the panic value of recorder.Fatalf.
type fatal struct{ msg string }

// recorder is a failer that turns Fatalf into a panic caught by
// failsSomewhere.
type recorder struct{}

func (recorder) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (recorder) Logf(string, ...any)               {}

// failsSomewhere runs prop on n deterministic byte inputs and returns nil
// if it fails on at least one: the way the tests show that a property can
// fail, by feeding it a known deviation.
func failsSomewhere(prop func(failer, Source), n int) (err error) {
	for k := range n {
		failed := func() (failed bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(fatal); !ok {
						panic(r)
					}
					failed = true
				}
			}()
			prop(recorder{}, &byteSource{data: seedBytes(uint64(k), 512)})
			return false
		}()
		if failed {
			return nil
		}
	}
	return fmt.Errorf("no failure in %d inputs", n)
}

var predCount struct{ measured, aliasCaught atomic.Int64 }

// predictorProp is docs/spec.md §8: the predictor reads sg(x), so its loss
// has no gradient with respect to the trunk's x: the finite difference of
// PredictorBCE (selection, targets and PredictorInput frozen) with respect
// to every coordinate of X is exactly 0, while its gradient with respect to
// the predictor's own weights is not. With sg removed (PredictorInput
// aliasing X) the same finite differences are not 0, which shows the
// property would catch "predictor without stop-gradient" (section 11).
func predictorProp(impl Impl) func(failer, Source) {
	return func(t failer, src Source) {
		c := genLayer(src, layerOpts{unitScale: true, float32: impl.Float32})
		c.cfg.Aux, c.cfg.AuxWeight = spec.AuxPredictor, 1
		c.p = ref.NewLayerParams(c.cfg, c.rng)
		res, err := impl.Layer(c.cfg, c.p, c.in)
		if err != nil {
			t.Fatalf("%s: %v\n%s", impl.Name, err, c)
		}
		loss := func(fz ref.Frozen) func() (float64, error) {
			return func() (float64, error) {
				r, err := impl.LayerFrozen(c.cfg, c.p, c.in, fz)
				if err != nil {
					return 0, err
				}
				return r.PredictorBCE, nil
			}
		}
		alias := res.Frozen
		alias.PredictorInput = c.in.X
		aliasNonzero := false
		for range 6 { // six coordinates of X per draw keep a draw fast
			b := src.Int(0, c.rows-1, "x row")
			data := c.in.X[b].RawMatrix().Data
			k := src.Int(0, len(data)-1, "x element")
			{
				d, err := ref.FDDerivative(loss(res.Frozen), data, k, 0)
				if err != nil {
					t.Fatalf("%s: %v", impl.Name, err)
				}
				if d != 0 {
					t.Fatalf("%s: predictor loss has derivative %v with respect to x[%d] element %d; the predictor must read sg(x) (docs/spec.md §8)\n%s", impl.Name, d, b, k, c)
				}
				if da, _ := ref.FDDerivative(loss(alias), data, k, 0); da != 0 {
					aliasNonzero = true
				}
			}
		}
		anyValid := false
		for b := range c.rows {
			anyValid = anyValid || validLen(c.in.Valid, b, c.s) > 0
		}
		if !anyValid {
			return
		}
		// A float32 loss of about 0.7 resolves changes of about 6e-8; the
		// biases' gradient can be as small as 5e-4 (predictor logits near
		// 0, targets half ones), which the default step of 1e-5 moves the
		// loss by less than that. A step of 1e-2 shows any such gradient;
		// only its sign of being non-zero is asserted here.
		h := 0.0
		if impl.Float32 {
			h = 1e-2
		}
		gw, err := ref.FDGradient(loss(res.Frozen), c.p.PredB1, h)
		if err != nil {
			t.Fatalf("%s: %v", impl.Name, err)
		}
		gb, err := ref.FDGradient(loss(res.Frozen), c.p.PredB2, h)
		if err != nil {
			t.Fatalf("%s: %v", impl.Name, err)
		}
		if gb[0] == 0 && allZero(gw) {
			t.Fatalf("%s: the predictor loss has zero gradient with respect to the predictor's own biases (%v, %v): it is not being trained\n%s", impl.Name, gw, gb, c)
		}
		predCount.measured.Add(1)
		if aliasNonzero {
			predCount.aliasCaught.Add(1)
		}
	}
}

func allZero(v []float64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestPredictorSendsNoGradientToTrunk runs on every implementation. Its
// finite differences need the selection, the targets and the predictor's
// input held fixed: ref.LayerForwardFrozen and mod's Layer.ForwardFrozen.
func TestPredictorSendsNoGradientToTrunk(t *testing.T) {
	for _, impl := range Impls {
		t.Run(impl.Name, func(t *testing.T) {
			predCount.measured.Store(0)
			predCount.aliasCaught.Store(0)
			check(t, predictorProp(impl))
			n, caught := predCount.measured.Load(), predCount.aliasCaught.Load()
			t.Logf("%s: draws with valid tokens: %d; without stop-gradient the derivative w.r.t. x was nonzero in %d", impl.Name, n, caught)
			if caught == 0 {
				t.Fatalf("%s: removing the stop-gradient never showed a gradient w.r.t. x in %d draws: the property could not fail", impl.Name, n)
			}
		})
	}
}

func FuzzPredictorGradient(f *testing.F) { f.Fuzz(fuzzImpls(predictorProp, Impls)) }
