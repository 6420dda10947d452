package golden

import (
	"slices"
	"testing"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/spec"
)

// TestMoDENeverCovers: every configuration modeNeverCovers refuses is one
// no draw generates (of 100 tried by their routing, none keeps its gaps
// clear with a token no expert chose and one several chose), and it
// refuses neither the corpus's MoDE cases nor two experts that take more
// than half the row between them.
func TestMoDENeverCovers(t *testing.T) {
	blk := spec.DefaultBlockConfig(8, 2, 16)
	blk.Positions = spec.PositionRoPE
	never := []oracle.MoDESpec{
		{Batch: 2, SeqLen: 16, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEStaged, Experts: 2, Capacity: 0.75, ExpertCapacity: 0.25}},
		{Batch: 1, SeqLen: 12, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEStaged, Experts: 2, Capacity: 1, ExpertCapacity: 0.5}},
		{Batch: 2, SeqLen: 9, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEStaged, Experts: 2, Capacity: 0.5, ExpertCapacity: 0.5}},
		{Batch: 2, SeqLen: 10, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEIntegrated, Experts: 1, NoOpExperts: 1, ExpertCapacity: 0.5}},
	}
	for _, s := range never {
		why, err := modeNeverCovers(s)
		if err != nil || why == "" {
			t.Errorf("%+v: not refused (%v)", s.Config, err)
			continue
		}
		for seed := range uint64(100) {
			res, err := modeRouting(s, seed)
			if err != nil {
				t.Fatal(err)
			}
			if gaps, ok := modeUsable(s.Config, res); ok {
				t.Errorf("%+v refused (%s), but the draw of seed %d has gaps %v and a token chosen by several experts: %v", s.Config, why, seed, gaps, res.Experts)
			}
		}
	}
	maybe := []oracle.MoDESpec{
		{Batch: 2, SeqLen: 8, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEStaged, Experts: 2, Capacity: 1, ExpertCapacity: 0.75}},
		{Batch: 2, SeqLen: 8, Config: spec.MoDEConfig{Block: blk, Form: spec.MoDEStaged, Experts: 2, NoOpExperts: 1, Capacity: 0.5, ExpertCapacity: 0.25}},
	}
	for _, s := range slices.Concat(modeSpecs(), maybe) {
		if why, err := modeNeverCovers(s); err != nil || why != "" {
			t.Errorf("%s %+v refused: %s (%v)", s.Name, s.Config, why, err)
		}
	}
}
