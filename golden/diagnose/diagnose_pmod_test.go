package diagnose

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
)

// TestPMoDDeviationsByHand checks tanh_gate and skipped_scaled on
// layer-paper against values worked out from the case's stored arrays
// alone (raw weighting: g = r, and f = (out − x)/g at a selected token),
// not from the emulation code: p-MoD's gate makes a selected token
// x + (1 + 0.2·tanh(r))·f and reports that weight at every valid token;
// STRing makes a skipped token r·x and leaves a selected one as it was.
func TestPMoDDeviationsByHand(t *testing.T) {
	c := loadCase(t, "layer-paper")
	ems := emulated(t, c)
	x, out, r := c.Arrays["input.x"], c.Arrays["expected.out"], c.Arrays["expected.router_logits"]
	tg, ts := c.Arrays["expected.targets"], c.Arrays["expected.weights"]
	gate := find(t, ems, "tanh_gate").arrays
	skip := find(t, ems, "skipped_scaled").arrays
	for b := 0; b < x.Shape[0]; b++ {
		for i := 0; i < x.Shape[1]; i++ {
			ri := at(r, b, i)
			g := 1 + 0.2*math.Tanh(ri)
			if w := at(gate["expected.weights"], b, i); !near(w, g, 1e-15) {
				t.Errorf("tanh_gate weights[%d %d] = %v, by hand 1 + 0.2·tanh(%v) = %v", b, i, w, ri, g)
			}
			if w := at(skip["expected.weights"], b, i); w != at(ts, b, i) {
				t.Errorf("skipped_scaled weights[%d %d] = %v, want the oracle's %v", b, i, w, at(ts, b, i))
			}
			selected := at(tg, b, i) == 1
			for j := 0; j < x.Shape[2]; j++ {
				xi, oi := at(x, b, i, j), at(out, b, i, j)
				wantGate, wantSkip := xi, ri*xi
				if selected {
					wantGate, wantSkip = xi+g*(oi-xi)/ri, oi
				}
				if got := at(gate["expected.out"], b, i, j); !near(got, wantGate, 1e-9) {
					t.Errorf("tanh_gate out[%d %d %d] = %v, by hand %v", b, i, j, got, wantGate)
				}
				if got := at(skip["expected.out"], b, i, j); !near(got, wantSkip, 1e-12) {
					t.Errorf("skipped_scaled out[%d %d %d] = %v, by hand %v", b, i, j, got, wantSkip)
				}
			}
		}
	}
}

// TestAuxOverPaddingByHand: on layer-padding-load-balance (rows of 10 and
// 6 valid tokens, router_bce 0.1 and load balancing 0.01), aux_over_padding
// averages router_bce over all 20 positions, a padded one adding
// BCE(r, 0) with r computed from its input, and puts σ(r) of the padded
// positions into P_s; the selection and the output do not change.
func TestAuxOverPaddingByHand(t *testing.T) {
	c := loadCase(t, "layer-padding-load-balance")
	s := layerSpecOf(c)
	dr, err := oracle.LayerDrawOf(c, s)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ref.LayerForward(s.Config, dr.P, dr.In)
	if err != nil {
		t.Fatal(err)
	}
	em := find(t, emulated(t, c), "aux_over_padding")
	var bce, lb float64
	rows, seq := s.Batch, s.SeqLen
	for i := 0; i < seq; i++ {
		f, p := 0.0, 0.0
		for b := 0; b < rows; b++ {
			rv, tv := res.RouterWeights[b][i], res.Targets[b][i]
			bce += math.Max(rv, 0) - rv*tv + math.Log1p(math.Exp(-math.Abs(rv)))
			f += tv
			p += 1 / (1 + math.Exp(-rv))
		}
		lb += f / float64(rows) * p / float64(rows)
	}
	bce /= float64(rows * seq)
	lb *= float64(seq)
	for name, want := range map[string]float64{
		"expected.aux.router_bce":   bce,
		"expected.aux.load_balance": lb,
		"expected.aux.total":        0.1*bce + 0.01*lb,
	} {
		if got := em.arrays[name].F[0]; !near(got, want, 1e-12) {
			t.Errorf("aux_over_padding %s = %v, by hand %v", name, got, want)
		}
		if c.Arrays[name].F[0] == em.arrays[name].F[0] {
			t.Errorf("aux_over_padding leaves %s as the oracle's", name)
		}
	}
	for _, name := range []string{"expected.out", "expected.selected"} {
		a, b := c.Arrays[name], em.arrays[name]
		if !slices.Equal(a.F, b.F) || !slices.Equal(a.I, b.I) {
			t.Errorf("aux_over_padding changes %s", name)
		}
	}
	// The padded inputs now reach the loss through the router.
	g := em.arrays["grad.input.x"]
	d := s.Config.Block.D
	if v := at(g, 1, 8, d-1); v == 0 {
		t.Errorf("grad.input.x at a padded position is 0 under aux_over_padding")
	}
	// Without padding there is nothing to count: the case's own arrays.
	nc := loadCase(t, "layer-router-bce")
	if got := find(t, emulated(t, nc), "aux_over_padding").arrays["expected.aux.total"]; got != nc.Arrays["expected.aux.total"] {
		t.Errorf("aux_over_padding on a case without padding is recomputed, not the case's own arrays")
	}
}

// TestDiagnoseNamesPMoD: candidates with p-MoD's gate, its STRing, both at
// once (p-MoD's whole routed layer, on layer-paper) and the losses over
// padding are each named, and nothing else matches them.
func TestDiagnoseNamesPMoD(t *testing.T) {
	for _, tc := range []struct{ name, dev string }{
		{"layer-paper", "tanh_gate"},
		{"layer-paper", "skipped_scaled"},
		{"layer-paper", "tanh_gate+skipped_scaled"},
		{"layer-paper", "weight_mlp_only+tanh_gate"},
		{"layer-short-row", "weight_mlp_only+capacity_floor_zero+tanh_gate+skipped_scaled"},
		{"layer-padding-load-balance", "aux_over_padding"},
	} {
		c := loadCase(t, tc.name)
		cand, err := DeviantCandidate(c, tc.dev, "")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		if got := matched(rs); !slices.Equal(got, []string{tc.dev}) {
			t.Errorf("%s, candidate with %s: matched %v", tc.name, tc.dev, got)
		}
	}
}

// TestPMoDGateOnTheMLPOnly: p-MoD's gate with the weight on the MLP's
// update only outputs x + a + g·m with p-MoD's g = 1 + α·tanh(r): neither
// the gate on the whole update nor the configured weight on the MLP's.
func TestPMoDGateOnTheMLPOnly(t *testing.T) {
	c := loadCase(t, "layer-paper")
	both, err := DeviantCandidate(c, "weight_mlp_only+tanh_gate", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, one := range []string{"weight_mlp_only", "tanh_gate"} {
		alone, err := DeviantCandidate(c, one, "")
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(both["out"].F, alone["out"].F) {
			t.Errorf("weight_mlp_only+tanh_gate computes %s's out", one)
		}
	}
	gate, _ := DeviantCandidate(c, "tanh_gate", "")
	if !slices.Equal(both["weights"].F, gate["weights"].F) || !slices.Equal(both["multipliers"].F, gate["multipliers"].F) {
		t.Error("the combination's weights or multipliers are not p-MoD's gate's")
	}
}

// TestSoftmaxWholeRow: softmax weighting over every valid token of the row
// (nanoMoD's) weighs each row's valid tokens to a sum of 1, the selected
// ones less than the softmax over the selection would; diagnose names it
// alone and with the weight on the MLP's update only, and it is not
// emulated where the layer's weighting is not softmax.
func TestSoftmaxWholeRow(t *testing.T) {
	c := loadCase(t, "layer-softmax")
	for _, dev := range []string{"softmax_whole_row", "weight_mlp_only+softmax_whole_row"} {
		cand, err := DeviantCandidate(c, dev, "")
		if err != nil {
			t.Fatal(err)
		}
		w := cand["weights"]
		s := c.Manifest.Config.SeqLen
		for b := range c.Manifest.Config.Batch {
			sum := 0.0
			for _, v := range w.F[b*s : (b+1)*s] {
				sum += v
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Errorf("%s: row %d's weights sum to %v", dev, b, sum)
			}
		}
		rs, err := Diagnose(c, cand)
		if err != nil {
			t.Fatal(err)
		}
		if got := matched(rs); !slices.Equal(got, []string{dev}) {
			t.Errorf("%s: matched %v", dev, got)
		}
	}
	if em := findAny(t, emulated(t, loadCase(t, "layer-paper")), "softmax_whole_row"); !strings.Contains(em.reason, "weighting \"raw\"") {
		t.Errorf("layer-paper: softmax_whole_row reason %q", em.reason)
	}
}
