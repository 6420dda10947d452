package golden

import (
	"fmt"
	"slices"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// modeSpecs is the catalogue of MoDE cases.
func modeSpecs() []oracle.MoDESpec {
	return []oracle.MoDESpec{
		{Name: "layer-mode-staged", Description: "Staged Mixture-of-Depths-and-Experts (docs/spec.md §14): the paper's MoD router (linear, capacity 0.5, raw weighting, gather) selects the tokens that enter attention and a mixture of 3 GELU experts with expert-choice routing (softmax gates of N2(h)·W_g, each expert takes the k_e = ⌊0.25·4⌋ = 1 token with the largest gate among the 4 selected tokens); out = x + r·(a + Σ gate·MLP_e) for the selected tokens. Some selected tokens are chosen by no expert, one by several.",
			Catches: []string{"mode_ungated_experts"}, Seed: 1, Batch: 2, SeqLen: 8,
			Config: spec.MoDEConfig{Block: block(), Form: spec.MoDEStaged, Experts: 3, Capacity: 0.5, ExpertCapacity: 0.25}},
		{Name: "layer-mode-integrated", Description: "Integrated Mixture-of-Depths-and-Experts (docs/spec.md §14): dense attention, then 2 GELU experts and 1 no-op expert with expert-choice routing over all 8 tokens (softmax over the 3 gates, k_e = ⌊0.5·8⌋ = 4 per expert); a token no conventional expert chose keeps x + a. Some tokens are chosen by no expert, some by several.",
			Catches: []string{"mode_ungated_experts"}, Seed: 1, Batch: 2, SeqLen: 8,
			Config: spec.MoDEConfig{Block: block(), Form: spec.MoDEIntegrated, Experts: 2, NoOpExperts: 1, ExpertCapacity: 0.5}},
	}
}

func drawMoDE(s oracle.MoDESpec, seed uint64) oracle.MoDEDraw {
	rng := ref.NewRand(seed)
	dr := oracle.MoDEDraw{P: ref.NewMoDEParams(s.Config, rng)}
	for range s.Batch {
		dr.X = append(dr.X, ref.RandomMatrix(rng, s.SeqLen, s.Config.Block.D, 1))
	}
	for range s.Batch {
		dr.U = append(dr.U, ref.RandomMatrix(rng, s.SeqLen, s.Config.Block.D, 1))
	}
	return dr
}

// modeCovers reports whether some token that reaches the experts is chosen
// by no conventional expert and some by several, so that a candidate that
// misroutes either kind shows it.
func modeCovers(cfg spec.MoDEConfig, res *ref.MoDEResult) bool {
	none, several := false, false
	for b, sel := range res.Selection.Rows {
		for _, i := range sel {
			n := 0
			for e := range cfg.Experts {
				if slices.Contains(res.Experts[b][e], i) {
					n++
				}
			}
			none, several = none || n == 0, several || n > 1
		}
	}
	return none && several
}

// genMoDE generates a MoDE case, redrawing until every routing decision is
// at least minCaseGap from a tie and the case has a token no expert chose
// and one several experts chose.
func genMoDE(s oracle.MoDESpec) (*format.Case, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, oracle.Errorf(s.Name, err)
	}
	for attempt := uint64(0); attempt < 200; attempt++ {
		seed := s.Seed + attempt
		dr := drawMoDE(s, seed)
		res, err := ref.MoDEForward(s.Config, dr.P, dr.X)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		gaps := oracle.MoDEGaps(res)
		if slices.ContainsFunc(gaps, func(g []float64) bool { return oracle.MinGap(g) < oracle.MinCaseGap }) || !modeCovers(s.Config, res) {
			continue
		}
		c, err := oracle.MoDECase(s, seed, dr, res, gaps)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		return c, nil
	}
	return nil, oracle.Errorf(s.Name, fmt.Errorf("no draw in 200 keeps every routing gap above %v with tokens chosen by no expert and by several", oracle.MinCaseGap))
}
