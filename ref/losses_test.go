package ref

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func TestBCEWithLogitsHand(t *testing.T) {
	assertScalar(t, "BCE(0,1)", BCEWithLogits(0, 1), math.Ln2, 1e-15)
	assertScalar(t, "BCE(2,1)", BCEWithLogits(2, 1), math.Log(1+math.Exp(-2)), 1e-15)
	assertScalar(t, "BCE(-3,0)", BCEWithLogits(-3, 0), math.Log(1+math.Exp(-3)), 1e-15)
	assertScalar(t, "BCE(1000,0)", BCEWithLogits(1000, 0), 1000, 0) // no overflow
	// Mean over the 3 valid tokens: (ln2 + ln2 + log(1+e^-2)) / 3.
	got := RouterBCELoss([][]float64{{0, 0}, {2, 99}}, [][]float64{{1, 0}, {1, 0}}, []int{2, 1})
	assertScalar(t, "router_bce", got, (2*math.Ln2+math.Log(1+math.Exp(-2)))/3, 1e-15)
}

func TestBCEFDMatchesClosedForm(t *testing.T) {
	for _, z := range []float64{-4, -0.3, 0.6, 3} {
		for _, tt := range []float64{0, 1} {
			zz := []float64{z}
			got, err := FDDerivative(func() (float64, error) { return BCEWithLogits(zz[0], tt), nil }, zz, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := 1/(1+math.Exp(-z)) - tt // d/dz = sigma(z) - t
			if math.Abs(got-want) > 1e-8*math.Abs(want) {
				t.Errorf("dBCE/dz at z=%v t=%v: fd %.12g, closed form %.12g", z, tt, got, want)
			}
		}
	}
}

func TestPredictorHand(t *testing.T) {
	p := &LayerParams{
		PredW1: mat.NewDense(2, 1, []float64{1, 2}),
		PredB1: []float64{0},
		PredW2: mat.NewDense(1, 1, []float64{3}),
		PredB2: []float64{0.5},
	}
	// x = (1, -0.5): a = 1 - 1 = 0, SiLU(0) = 0, q = 0.5.
	assertScalar(t, "q", PredictorLogit(p, []float64{1, -0.5}), 0.5, 0)
	// x = (1, 0): a = 1, SiLU(1) = 1/(1+e^-1), q = 3/(1+e^-1) + 0.5.
	assertScalar(t, "q", PredictorLogit(p, []float64{1, 0}), 3/(1+math.Exp(-1))+0.5, 1e-15)
	q := [][]float64{{1, -1, 0.5, -2}}
	tt := [][]float64{{1, 1, 0, 0}}
	assertScalar(t, "accuracy", PredictorAccuracy(q, tt, nil), 0.5, 0)
	assertScalar(t, "accuracy on 1 valid", PredictorAccuracy(q, tt, []int{1}), 1, 0)
}

func TestLoadBalanceHand(t *testing.T) {
	// r = 0 everywhere: p = 1/2. m = [[1,0],[1,1]]: F = (1, 1/2), P = (1/2, 1/2).
	// L = S * (1*1/2 + 1/2*1/2) = 2 * 3/4 = 1.5.
	r := [][]float64{{0, 0}, {0, 0}}
	m := [][]float64{{1, 0}, {1, 1}}
	assertScalar(t, "load balance", LoadBalanceLoss(r, m, nil), 1.5, 1e-15)
	// Row 1 padded after 1 token: F = (1, 0), P = (1/2, 1/4): L = 2 * (1/2) = 1.
	assertScalar(t, "load balance padded", LoadBalanceLoss(r, [][]float64{{1, 0}, {1, 1}}, []int{2, 1}), 1, 1e-15)
}

func TestCrossEntropyHand(t *testing.T) {
	assertScalar(t, "CE uniform", CrossEntropy([]float64{0, 0, 0}, 1), math.Log(3), 1e-15)
	// logits (ln1, ln3): p(target=1) = 3/4.
	assertScalar(t, "CE", CrossEntropy([]float64{0, math.Log(3)}, 1), -math.Log(0.75), 1e-15)
}
