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
