package golden

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/mat"

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

// modeRouting is the routing of the MoDE draw of seed (drawMoDE) without
// the draw's expert parameters or upstream gradients, which do not decide
// it: their draws are skipped (ref.NewMoDERoutingParams), the layer's
// attention and gates computed, no expert run (ref.MoDERoute).
func modeRouting(s oracle.MoDESpec, seed uint64) (*ref.MoDEResult, error) {
	rng := ref.NewRand(seed)
	p := ref.NewMoDERoutingParams(s.Config, rng)
	var x []*mat.Dense
	for range s.Batch {
		x = append(x, ref.RandomMatrix(rng, s.SeqLen, s.Config.Block.D, 1))
	}
	return ref.MoDERoute(s.Config, p, x)
}

// modeUsable reports whether a MoDE routing res keeps every routing
// decision at least MinCaseGap from a tie and has a token no expert chose
// and one several experts chose; gaps are its routing gaps.
func modeUsable(cfg spec.MoDEConfig, res *ref.MoDEResult) (gaps [][]float64, ok bool) {
	gaps = oracle.MoDEGaps(res)
	return gaps, !slices.ContainsFunc(gaps, func(g []float64) bool { return oracle.MinGap(g) < oracle.MinCaseGap }) && modeCovers(cfg, res)
}

// genMoDE generates a MoDE case, redrawing until every routing decision is
// at least minCaseGap from a tie and the case has a token no expert chose
// and one several experts chose. Each draw is tried by its routing alone
// (modeRouting: most of a draw is its experts' parameters, which the
// routing does not read), and only the kept one is drawn whole, so that a
// configuration no draw in 200 generates is refused at a fraction of
// drawing and running 200 whole layers; the draws tried, and the one kept,
// are the same.
func genMoDE(s oracle.MoDESpec) (*format.Case, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, oracle.Errorf(s.Name, err)
	}
	if why, err := modeNeverCovers(s); err != nil || why != "" {
		if err == nil {
			err = fmt.Errorf("no draw can have a token chosen by several experts with every routing gap above %v: %s", oracle.MinCaseGap, why)
		}
		return nil, oracle.Errorf(s.Name, err)
	}
	for attempt := uint64(0); attempt < 200; attempt++ {
		seed := s.Seed + attempt
		route, err := modeRouting(s, seed)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		if _, ok := modeUsable(s.Config, route); !ok {
			continue
		}
		dr := drawMoDE(s, seed)
		res, err := ref.MoDEForward(s.Config, dr.P, dr.X)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		gaps, ok := modeUsable(s.Config, res)
		if !ok {
			// The routing of the whole draw is modeRouting's
			// (TestMoDERouteIsMoDEForwards, in ref).
			return nil, oracle.Errorf(s.Name, fmt.Errorf("the draw of seed %d routes differently drawn whole than by its routing alone", seed))
		}
		c, err := oracle.MoDECase(s, seed, dr, res, gaps)
		if err != nil {
			return nil, oracle.Errorf(s.Name, err)
		}
		return c, nil
	}
	return nil, oracle.Errorf(s.Name, fmt.Errorf("no draw in 200 keeps every routing gap above %v with tokens chosen by no expert and by several", oracle.MinCaseGap))
}

// modeNeverCovers says why no draw of s has a token chosen by several
// conventional experts while every routing decision is MinCaseGap clear of
// a tie, or returns "" when a draw may. With fewer than two conventional
// experts no token has several. With two and no no-op expert the gates
// are two and sum to 1 (to a few ulps): expert 0 takes the k_e tokens of
// largest g, expert 1 those of largest 1 − g, that is of smallest g; when
// 2·k_e ≤ n (the computed tokens of a row) and expert 0's boundary gap is
// at least MinCaseGap, each of the n − k_e ≥ k_e tokens expert 0 left
// has a larger 1 − g than any token it took, so expert 1 takes none of
// those, and no token has both (TestMoDENeverCovers draws such
// configurations and finds none). genMoDE refuses such a configuration at
// once instead of trying 200 draws that cannot succeed.
func modeNeverCovers(s oracle.MoDESpec) (string, error) {
	cfg := s.Config
	if cfg.Experts < 2 {
		return fmt.Sprintf("%d conventional expert", cfg.Experts), nil
	}
	if cfg.Experts > 2 || cfg.NoOpExperts > 0 {
		return "", nil
	}
	n := s.SeqLen // the computed tokens of each row: every one, integrated
	if cfg.Form == spec.MoDEStaged {
		k, err := ref.CapacityFromRatio(cfg.Capacity, s.SeqLen)
		if err != nil {
			return "", err
		}
		n = k
	}
	if ke := ref.ExpertCapacity(cfg.ExpertCapacity, n); 2*ke <= n {
		return fmt.Sprintf("two experts and no no-op expert have gates g and 1 − g, so each takes its k_e = %d of the %d computed tokens from the other end of the row, and 2·k_e ≤ %d leaves none to both", ke, n, n), nil
	}
	return "", nil
}
