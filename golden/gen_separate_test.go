package golden

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/internal/race"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// TestGenSeparatesLongSequences checks gen at a long sequence, where
// hardly any draw keeps the routing clear of the margin: the case is made
// from the first draw with its routing moved apart (separateRouting), every
// gap at least minCaseGap, under top-k routing with each router that has
// an input to move and under causal routing by the router; under causal
// routing by the predictor it is refused, with the reason.
func TestGenSeparatesLongSequences(t *testing.T) {
	race.SkipShort(t, "generation at S = 2048 runs on one goroutine, where the race detector has nothing to watch, and it slows it to minutes (193 s at a load of 30); go test ./golden runs it")
	for _, c := range []struct {
		router spec.RouterKind
		causal spec.CausalRouting
		ok     bool
	}{
		{spec.RouterLinear, spec.CausalOff, true},
		{spec.RouterLinearBias, spec.CausalOff, true},
		{spec.RouterL2Norm, spec.CausalOff, true},
		{spec.RouterRandom, spec.CausalOff, true},
		{spec.RouterLinear, spec.CausalRouter, true},
		{spec.RouterLinear, spec.CausalPredictor, false},
	} {
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(8, 2, 16), 0.25)
		cfg.Router, cfg.Causal = c.router, c.causal
		if c.causal != spec.CausalOff {
			cfg.Weighting, cfg.Aux, cfg.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1
			if c.causal == spec.CausalPredictor {
				cfg.Aux = spec.AuxPredictor
			}
		}
		s := oracle.LayerSpec{Name: "long", Seed: 1, Batch: 2, SeqLen: 2048, Valid: []int{2048, 1031}, Config: cfg}
		kase, err := genLayer(s)
		name := fmt.Sprintf("%s router, causal %s", c.router, c.causal)
		if !c.ok {
			if err == nil || !strings.Contains(err.Error(), "no draw in 100") {
				t.Errorf("%s: error %v, want one saying no draw is clear", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if seed := kase.Manifest.Provenance.Seed; seed != 1 {
			t.Errorf("%s: the case is the draw of seed %d, want the first (1), separated", name, seed)
		}
		for _, row := range kase.Manifest.Routing.Gaps[0] {
			if row >= 0 && row < oracle.MinCaseGap {
				t.Errorf("%s: gaps %v, want each at least %v", name, kase.Manifest.Routing.Gaps[0], oracle.MinCaseGap)
				break
			}
		}
	}
}

// TestClearChanceMatchesDraws checks clearChance's estimate against the
// fraction of draws that are clear: rows of S N(0, 1) router weights, the
// top k of each selected (top-k) or each weight's sign deciding (causal),
// over enough draws that the fraction is known to a few percent.
func TestClearChanceMatchesDraws(t *testing.T) {
	rng := ref.NewRand(7)
	for _, c := range []struct {
		s, k int
	}{{512, 64}, {128, 16}, {64, 0}} {
		const draws = 2000
		clear, estimate := 0, 0.0
		for range draws {
			row := ref.RandomVector(rng, c.s, 0, 1)
			r := [][]float64{row}
			var k []int
			var gaps []float64
			if c.k > 0 {
				k = []int{c.k}
				gaps = oracle.GapsOf(ref.BoundaryGaps(r, k, nil))
			} else {
				gaps = oracle.CausalGaps(r, nil)
			}
			if oracle.MinGap(gaps) >= oracle.MinCaseGap {
				clear++
			}
			estimate += clearChance(r, k, nil)
		}
		got, want := estimate/draws, float64(clear)/draws
		if math.Abs(got-want) > 0.15*want+0.01 {
			t.Errorf("S = %d, k = %d: estimated chance %.3f, %d of %d draws clear (%.3f)", c.s, c.k, got, clear, draws, want)
		}
	}
}

// TestGenSeparatesLongModels checks gen of model and decode cases at a
// sequence long enough that hardly any draw keeps every routed layer
// clear of the margin: the case is the first draw with each routed
// layer's router weights moved apart in turn (separateModelRouting), every
// gap at least MinCaseGap, the first routed layer's selection the draw's,
// and no parameter but the routers' changed (a router's bias scaled with
// its weights); under top-k routing with a
// linear router with and without a bias and the random router, and under
// causal routing by the router (a decode case). The l2norm router and
// routing by the predictor have nothing to move, and are refused.
func TestGenSeparatesLongModels(t *testing.T) {
	race.SkipShort(t, "model generation at S = 512 runs on one goroutine, where the race detector has nothing to watch; go test ./golden runs it")
	for _, c := range []struct {
		router spec.RouterKind
		causal spec.CausalRouting
		decode bool
		ok     bool
	}{
		{spec.RouterLinear, spec.CausalOff, false, true},
		{spec.RouterLinearBias, spec.CausalOff, false, true},
		{spec.RouterRandom, spec.CausalOff, false, true},
		{spec.RouterLinear, spec.CausalRouter, true, true},
		{spec.RouterL2Norm, spec.CausalOff, false, false},
		{spec.RouterLinear, spec.CausalPredictor, true, false},
	} {
		name := fmt.Sprintf("%s router, causal %s", c.router, c.causal)
		cfg := spec.DefaultConfig(spec.DefaultBlockConfig(128, 2, 128), 0.125)
		cfg.Router, cfg.Causal = c.router, c.causal
		if c.causal != spec.CausalOff {
			cfg.Weighting, cfg.Aux, cfg.AuxWeight = spec.WeightSigmoid, spec.AuxRouterBCE, 0.1
			if c.causal == spec.CausalPredictor {
				cfg.Aux = spec.AuxPredictor
			}
		}
		mc := spec.ModelConfig{Vocab: 64, MaxLen: 1024, Layers: []spec.ModelLayer{{Config: cfg}, {Routed: true, Config: cfg}, {Routed: true, Config: cfg}}}
		s := oracle.ModelSpec{Name: "long", Seed: 1, Batch: 3, SeqLen: 1024, Valid: []int{1024, 1024, 601}, Config: mc, Decode: c.decode}
		if !c.ok {
			p, in := drawModel(s, s.Seed)
			if _, err := separateModelRouting(s, p, in); err == nil {
				t.Errorf("%s: the routing was moved apart, want it refused", name)
			}
			continue
		}
		p0, in0 := drawModel(s, s.Seed)
		res0, err := ref.ModelForward(mc, p0, in0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		kase, err := genModel(s)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if seed := kase.Manifest.Provenance.Seed; seed != 1 || kase.Separation == "" {
			t.Errorf("%s: the case is the draw of seed %d, separation %q; want the first (1), separated", name, seed, kase.Separation)
		}
		for l, g := range kase.Manifest.Routing.Gaps {
			if m := oracle.MinGap(g); m < oracle.MinCaseGap {
				t.Errorf("%s: routed layer %d's gaps %v, want each at least %v", name, l, g, oracle.MinCaseGap)
			}
		}
		p, in := drawModel(s, s.Seed)
		if _, err := separateModelRouting(s, p, in); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res, err := ref.ModelForward(mc, p, in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for b, row := range res0.Layers[1].Selection.Rows {
			if got := res.Layers[1].Selection.Rows[b]; fmt.Sprint(got) != fmt.Sprint(row) {
				t.Errorf("%s: the first routed layer's row %d selects %v, the draw %v", name, b, got, row)
			}
		}
		before := p0.Tensors()
		for n, tn := range p.Tensors() {
			moved := fmt.Sprint(tn.Data) != fmt.Sprint(before[n].Data)
			routed := !strings.HasPrefix(tn.Name, "L0.") && c.router != spec.RouterRandom
			switch {
			case routed && strings.HasSuffix(tn.Name, ".Router") && !moved:
				t.Errorf("%s: %s did not move", name, tn.Name)
			case moved && !(routed && (strings.HasSuffix(tn.Name, ".Router") || strings.HasSuffix(tn.Name, ".RouterBias"))):
				t.Errorf("%s: %s moved, want only the routed layers' router weights (and a bias scaled with them) moved", name, tn.Name)
			}
		}
	}
}
