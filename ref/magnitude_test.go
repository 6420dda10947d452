package ref

import (
	"math"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
	"pgregory.net/rapid"
)

// drawMagnitudeLayer draws a layer configuration, parameters, inputs and
// an upstream gradient (drawLayerConfig, drawLayerInputs), with the
// auxiliary losses weighted 0 so that every gradient is linear in the
// upstream gradient.
func drawMagnitudeLayer(t *rapid.T) (spec.Config, *LayerParams, LayerInputs, Frozen, []*mat.Dense) {
	c := drawLayerConfig(t)
	c.AuxWeight, c.LoadBalanceWeight = 0, 0
	p := NewLayerParams(c, NewRand(rapid.Uint64().Draw(t, "seed")))
	in := drawLayerInputs(t, c)
	rng := NewRand(rapid.Uint64().Draw(t, "useed"))
	s, _ := in.X[0].Dims()
	var u []*mat.Dense
	for range in.X {
		u = append(u, RandomMatrix(rng, s, c.Block.D, 1))
	}
	res, err := LayerForward(c, p, in)
	if err != nil {
		t.Fatal(err)
	}
	return c, p, in, res.Frozen, u
}

// TestMagnitudesScaleWithTheUpstream checks the squares arithmetic's
// bookkeeping on drawn layers: a gradient's magnitude is the
// root-sum-square of terms each linear in the upstream gradient, so
// scaling the upstream by 3 scales every magnitude by 3 (a factor squared
// twice, or a gradient squared where only its factors are, breaks it), and
// no magnitude is negative or NaN.
func TestMagnitudesScaleWithTheUpstream(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, p, in, fz, u := drawMagnitudeLayer(t)
		m1, err := LayerGradientMagnitudes(c, p, in, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		var u3 []*mat.Dense
		for _, ub := range u {
			var x mat.Dense
			x.Scale(3, ub)
			u3 = append(u3, &x)
		}
		m3, err := LayerGradientMagnitudes(c, p, in, fz, u3)
		if err != nil {
			t.Fatal(err)
		}
		t1, t3 := m1.Params.Tensors(""), m3.Params.Tensors("")
		for k := range t1 {
			for i, v := range t1[k].Data {
				if !(v >= 0) || math.Abs(t3[k].Data[i]-3*v) > 1e-12*3*v {
					t.Fatalf("%s[%d]: magnitude %v, with the upstream ×3 %v, want %v", t1[k].Name, i, v, t3[k].Data[i], 3*v)
				}
			}
		}
	})
}

// TestForwardMagnitudesSameBits checks that
// LayerForwardGradientMagnitudes, one forward pass, gives
// LayerGradientMagnitudes' bits at LayerForward's decision.
func TestForwardMagnitudesSameBits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, p, in, fz, u := drawMagnitudeLayer(t)
		m, err := LayerGradientMagnitudes(c, p, in, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		m1, err := LayerForwardGradientMagnitudes(c, p, in, u)
		if err != nil {
			t.Fatal(err)
		}
		sameTensorBits(t, "LayerForwardGradientMagnitudes", m1.Params.Tensors(""), m.Params.Tensors(""))
		for b := range m.X {
			sameTensorBits(t, "LayerForwardGradientMagnitudes of X", []Tensor{denseTensor("X", m1.X[b])}, []Tensor{denseTensor("X", m.X[b])})
		}
	})
}

// TestKeyBiasMagnitudeKeepsWhatCancelled checks the case the magnitudes
// are for: with learned positions the key bias shifts every key alike,
// softmax does not see it, and its gradient Σ_t dK_t is 0 but for
// round-off, while the magnitude keeps the scale of the dK_t that
// cancelled, that of the query bias's gradient, which does not cancel.
func TestKeyBiasMagnitudeKeepsWhatCancelled(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, _, in, _, u := drawMagnitudeLayer(t)
		c.Block.Positions, c.Block.QKVBias = spec.PositionLearned, true
		p := NewLayerParams(c, NewRand(rapid.Uint64().Draw(t, "bseed")))
		res, err := LayerForward(c, p, in)
		if err != nil {
			t.Fatal(err)
		}
		fz := res.Frozen
		_, g, err := LayerGradients(c, p, in, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		m, err := LayerGradientMagnitudes(c, p, in, fz, u)
		if err != nil {
			t.Fatal(err)
		}
		bk, mk, mq := maxAbsOf(g.Params.Block.Bk), maxAbsOf(m.Params.Block.Bk), maxAbsOf(m.Params.Block.Bq)
		if bk > 1e-12*mk {
			t.Fatalf("key bias gradient %.3g, magnitude %.3g: not 0 by cancellation", bk, mk)
		}
		if mq > 0 && !(mk > 0) {
			t.Fatalf("key bias magnitude %.3g beside the query bias's %.3g: the cancelled scale is lost", mk, mq)
		}
	})
}

func maxAbsOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}
