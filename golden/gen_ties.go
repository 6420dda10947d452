package golden

import (
	"fmt"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/internal/lowp"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// roundingTieGap is how far below the first token left out makeRoundingTies
// puts the token the tie rule selects at bf16: far above float32's
// resolution of a router weight of order one (about 1e-7), far below
// bf16's (about 4e-3), and below the float32 near-tie margin.
const roundingTieGap = 1e-4

// makeRoundingTies turns makeTies's exact ties into ties that only bf16
// sees. In every row the pair of tied tokens (one selected, one left out)
// has equal inputs; the one at the lower position, which the tie rule
// selects, gets its input moved by −roundingTieGap·w/‖w‖² (w the linear
// router's weights), so that its float64 router weight is roundingTieGap
// below the other's and the truth selects the other, while every
// coordinate still rounds to the same bf16 value, so that a bf16
// implementation computes equal weights and, breaking the tie by the lower
// position, selects it. ok is false when some coordinate would round
// differently (the caller redraws).
func makeRoundingTies(s oracle.LayerSpec, dr oracle.LayerDraw) (ok bool, err error) {
	if s.Config.Router != spec.RouterLinear || s.Config.Causal != spec.CausalOff {
		return false, fmt.Errorf("rounding ties need top-k routing by a linear router without bias")
	}
	res, err := ref.LayerForward(s.Config, dr.P, dr.In)
	if err != nil {
		return false, err
	}
	w := dr.P.Router
	ww := 0.0
	for _, v := range w {
		ww += float64(v * v)
	}
	for b, row := range res.RouterWeights {
		p := tiedSelected(row, res.Selection.Rows[b], oracle.ValidLen(s.Valid, b, s.SeqLen))
		if p < 0 {
			return false, fmt.Errorf("row %d has no tie to move", b)
		}
		x := dr.In.X[b].RawRowView(p)
		for j, v := range w {
			moved := x[j] - float64(roundingTieGap*v)/ww
			if lowp.BF16.Round(moved) != lowp.BF16.Round(x[j]) {
				return false, nil
			}
			x[j] = moved
		}
	}
	return true, nil
}

// tiedSelected returns the selected position whose router weight equals
// that of a later position left out (makeTies's pair), or −1.
func tiedSelected(r []float64, selected []int, valid int) int {
	in := make(map[int]bool)
	for _, i := range selected {
		in[i] = true
	}
	for _, p := range selected {
		for q := p + 1; q < valid; q++ {
			if !in[q] && r[q] == r[p] {
				return p
			}
		}
	}
	return -1
}
