package ref

import (
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

func TestRouterEquationsHand(t *testing.T) {
	assertScalar(t, "linear", RouterLinearWeight([]float64{1, 2}, []float64{3, -1}), 1, 0)
	assertScalar(t, "linear_bias", RouterLinearBiasWeight([]float64{1, 2}, 0.5, []float64{3, -1}), 1.5, 0)
	assertScalar(t, "l2norm", RouterL2NormWeight([]float64{3, 4}), 5, 0)
	assertScalar(t, "jitter", Jittered(1, 0.25, 2), 1.5, 0)
}

func TestRouterWeightsBatch(t *testing.T) {
	blk := spec.DefaultBlockConfig(2, 1, 2)
	cfg := spec.DefaultConfig(blk, 0.5)
	p := &LayerParams{Router: []float64{1, 2}}
	x := []*mat.Dense{mat.NewDense(2, 2, []float64{3, -1, 0.5, 0.25})}
	r, err := RouterWeights(cfg, p, x, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "r", r[0], []float64{1, 1}, 0)

	cfg.Router, cfg.Jitter = spec.RouterRandom, 0.5
	r, err = RouterWeights(cfg, p, x, [][]float64{{-1, 2}}, [][]float64{{2, 4}})
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "random+jitter r", r[0], []float64{0, 4}, 0) // -1 + 0.5*2, 2 + 0.5*4

	if _, err := RouterWeights(cfg, p, x, nil, [][]float64{{2, 4}}); err == nil || !strings.Contains(err.Error(), "noise input") {
		t.Errorf("random router without noise: %v", err)
	}
	if _, err := RouterWeights(cfg, p, x, [][]float64{{1, 2, 3}}, [][]float64{{2, 4}}); err == nil || !strings.Contains(err.Error(), "length 3, want S = 2") {
		t.Errorf("noise of wrong shape: %v", err)
	}
	if _, err := RouterWeights(cfg, p, []*mat.Dense{mat.NewDense(2, 3, nil)}, nil, nil); err == nil || !strings.Contains(err.Error(), "want S×d = 2×2") {
		t.Errorf("x of wrong width: %v", err)
	}
}

func TestOutputWeightsHand(t *testing.T) {
	r := [][]float64{{math.Log(1), 7, math.Log(3), -2}}
	sel := Selection{S: 4, Rows: [][]int{{0, 2}}}
	// softmax over the selected r: exp(ln1)/(1+3) = 1/4, exp(ln3)/4 = 3/4.
	assertClose(t, "softmax g", OutputWeights(spec.WeightSoftmax, r, sel, nil)[0], []float64{0.25, 0, 0.75, 0}, 1e-15)
	assertClose(t, "raw g", OutputWeights(spec.WeightRaw, r, sel, []int{3})[0], []float64{0, 7, math.Log(3), 0}, 0)
	assertClose(t, "none g", OutputWeights(spec.WeightNone, r, sel, nil)[0], []float64{1, 1, 1, 1}, 0)
	// sigma(0) = 1/2, sigma(ln 3) = 3/4, sigma(-2) = 1/(1+e^2).
	g := OutputWeights(spec.WeightSigmoid, r, sel, nil)[0]
	assertClose(t, "sigmoid g", []float64{g[0], g[2], g[3]}, []float64{0.5, 0.75, 1 / (1 + math.Exp(2))}, 1e-15)
}

func TestStraightThroughHand(t *testing.T) {
	g := [][]float64{{0.3, 0.7}}
	m := [][]float64{{1, 0}}
	off := StraightThroughOffsets(g, m)
	w := StraightThroughWeights(g, off)
	assertClose(t, "forward w = m*g", w[0], []float64{0.3, 0}, 0)
	// With the offset frozen, dw_i/dg_i = 1 for the selected and the skipped token.
	for i := range g[0] {
		d, err := FDDerivative(func() (float64, error) { return StraightThroughWeights(g, off)[0][i], nil }, g[0], i, 0)
		if err != nil {
			t.Fatal(err)
		}
		assertScalar(t, "dw/dg", d, 1, 1e-9)
	}
}

func TestSoftmaxFDMatchesClosedForm(t *testing.T) {
	v := []float64{0.3, -1.2, 2.0, 0.7}
	p := Softmax(v)
	for i := range v {
		for j := range v {
			got, err := FDDerivative(func() (float64, error) { return Softmax(v)[i], nil }, v, j, 0)
			if err != nil {
				t.Fatal(err)
			}
			// d p_i / d v_j = p_i (delta_ij - p_j).
			want := -p[i] * p[j]
			if i == j {
				want += p[i]
			}
			if math.Abs(got-want) > 1e-8*math.Abs(want) {
				t.Errorf("dsoftmax_%d/dv_%d: fd %.12g, closed form %.12g, relative difference %.3g", i, j, got, want, (got-want)/want)
			}
		}
	}
}
