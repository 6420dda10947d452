package mod_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// sameBits reports the first index where a and b differ as bits, or -1.
func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestForwardFrozenReplaysForward checks that replaying a forward's own
// decision (LayerResult.Frozen) on the same inputs gives the same output,
// weights, losses and gradients, bit for bit, over every router, weighting,
// compute mode, auxiliary objective, causal rule and padding.
func TestForwardFrozenReplaysForward(t *testing.T) {
	rapidChecks(100)
	rapid.Check(t, func(t *rapid.T) {
		c := drawLayerCase(t)
		run := func(fz *mod.Frozen) (*mod.LayerResult, [][]float32) {
			l := layerFromRef(t, c.cfg, c.p)
			in := modcase.LayerInputsFromRef(c.in)
			var tp autograd.Tape
			var res *mod.LayerResult
			var err error
			if fz == nil {
				res, err = l.Forward(&tp, in)
			} else {
				res, err = l.ForwardFrozen(&tp, in, *fz)
			}
			if err != nil {
				t.Fatal(err)
			}
			loss := tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, to32(c.u))))
			if res.AuxLoss != nil {
				loss = tp.Add(loss, res.AuxLoss)
			}
			tp.Backward(loss)
			grads := [][]float32{in.X.Grad}
			for _, p := range l.Params("") {
				grads = append(grads, p.T.Grad)
			}
			return res, grads
		}
		res, grads := run(nil)
		fz := res.Frozen
		if (fz.STEOffset != nil) != (c.cfg.Compute == spec.ComputeDense) || (fz.PredictorInput != nil) != c.cfg.HasPredictor() {
			t.Fatalf("Frozen holds STEOffset %v and PredictorInput %v for compute %s, predictor %v", fz.STEOffset != nil, fz.PredictorInput != nil, c.cfg.Compute, c.cfg.HasPredictor())
		}
		res2, grads2 := run(&fz)
		for _, a := range []struct {
			name      string
			got, want []float32
		}{{"out", res2.Out.Data, res.Out.Data}, {"router logits", res2.RouterLogits, res.RouterLogits},
			{"weights", res2.Weights, res.Weights}, {"multipliers", res2.Multipliers, res.Multipliers},
			{"targets", res2.Targets, res.Targets}, {"predictor logits", res2.PredictorLogits, res.PredictorLogits},
			{"losses", []float32{float32(res2.RouterBCE), float32(res2.PredictorBCE), float32(res2.LoadBalance), float32(res2.Aux)},
				[]float32{float32(res.RouterBCE), float32(res.PredictorBCE), float32(res.LoadBalance), float32(res.Aux)}}} {
			if i := sameBits(a.got, a.want); i >= 0 {
				t.Fatalf("replayed %s differs at %d (len %d vs %d)", a.name, i, len(a.got), len(a.want))
			}
		}
		for j := range grads {
			if i := sameBits(grads2[j], grads[j]); i >= 0 {
				t.Fatalf("replayed gradient %d (0 = x, then the parameters in order) differs at %d: %v vs %v", j, i, grads2[j][i], grads[j][i])
			}
		}
		if res2.Routed != res.Routed || res2.Skipped != res.Skipped || !slices.Equal(res2.Capacity, res.Capacity) || res2.FLOPs != res.FLOPs {
			t.Fatalf("replayed counts %d/%d %v %+v, forward %d/%d %v %+v", res2.Routed, res2.Skipped, res2.Capacity, res2.FLOPs, res.Routed, res.Skipped, res.Capacity, res.FLOPs)
		}
	})
}

// TestForwardFrozenRejectsBadDecisions checks that a decision that does not
// fit the inputs is an error naming what is wrong.
func TestForwardFrozenRejectsBadDecisions(t *testing.T) {
	cfg := spec.DefaultConfig(spec.DefaultBlockConfig(4, 1, 8), 0.5)
	cfg.Compute = spec.ComputeDense
	l := layerFromRef(t, cfg, ref.NewLayerParams(cfg, ref.NewRand(1)))
	in := mod.LayerInputs{X: autograd.New(8, 4, nil), Batch: 2, SeqLen: 4, Valid: []int{4, 2}}
	good := mod.Frozen{Selected: [][]int{{0, 2}, {1}}, TopK: [][]int{{0, 2}, {1}}, STEOffset: make([]float32, 8)}
	var tp autograd.Tape
	if _, err := l.ForwardFrozen(&tp, in, good); err != nil {
		t.Fatalf("a valid decision: %v", err)
	}
	for _, bad := range []struct {
		want string
		edit func(*mod.Frozen)
	}{
		{"Selected has 1 rows", func(f *mod.Frozen) { f.Selected = f.Selected[:1] }},
		{"Selected row 1", func(f *mod.Frozen) { f.Selected = [][]int{{0, 2}, {2}} }}, // padding
		{"Selected row 0", func(f *mod.Frozen) { f.Selected = [][]int{{2, 0}, {1}} }}, // unsorted
		{"TopK row 0", func(f *mod.Frozen) { f.TopK = [][]int{{1, 1}, {1}} }},         // repeated
		{"STEOffset is nil", func(f *mod.Frozen) { f.STEOffset = nil }},
		{"STEOffset has 3 values", func(f *mod.Frozen) { f.STEOffset = make([]float32, 3) }},
		{"PredictorInput is given", func(f *mod.Frozen) { f.PredictorInput = make([]float32, 32) }},
	} {
		fz := good
		bad.edit(&fz)
		_, err := l.ForwardFrozen(&tp, in, fz)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("want an error containing %q, got %v", bad.want, err)
		}
	}
}
