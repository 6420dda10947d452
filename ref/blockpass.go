package ref

import (
	"fmt"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// BlockAt places the n rows of a BlockPass. Row t's query and key turn by
// RoPE at RoPE[t]; row t attends to rows 0..t (causal in row order), and
// with a window only to those rows u with Window[u] > Window[t] − w
// (docs/spec.md §13), or, Bidirectional, to every row. BlockUpdate is the
// pass at RoPE = Window = the ascending positions.
type BlockAt struct {
	RoPE          []int // n positions, any order
	Window        []int // n positions, ascending
	Bidirectional bool  // every row sees every row; the block must have no window
}

// BlockPass is the block of docs/spec.md §5 over n rows placed by a
// BlockAt, a = Attn(N1(X)), h = X + a, m = MLP(N2(h)), kept for its
// backward pass.
type BlockPass struct {
	c  spec.BlockConfig
	p  *BlockParams
	ac *blockActs
}

// NewBlockPass evaluates the block over the rows of x (n×d) placed by at.
func NewBlockPass(c spec.BlockConfig, p *BlockParams, x *mat.Dense, at BlockAt) (*BlockPass, error) {
	if err := p.Check(c); err != nil {
		return nil, err
	}
	n, d := x.Dims()
	if d != c.D {
		return nil, fmt.Errorf("block pass: rows have %d columns, want d = %d", d, c.D)
	}
	if len(at.RoPE) != n || len(at.Window) != n {
		return nil, fmt.Errorf("block pass: %d RoPE and %d window positions for %d rows, want one of each per row", len(at.RoPE), len(at.Window), n)
	}
	for t := 1; t < n; t++ {
		if at.Window[t] < at.Window[t-1] {
			return nil, fmt.Errorf("block pass: window positions %d then %d descend", at.Window[t-1], at.Window[t])
		}
	}
	if at.Bidirectional && c.Window > 0 {
		return nil, fmt.Errorf("block pass: a bidirectional pass has no window, the block has window %d", c.Window)
	}
	ac := attentionAt(c, p, rawRows(x), at)
	h := make([]float64, len(ac.x))
	for j := range h {
		h[j] = ac.x[j] + ac.a[j]
	}
	mlpForward(c, p, ac, h)
	return &BlockPass{c: c, p: p, ac: ac}, nil
}

// Attention returns the attention update a (n×d).
func (bp *BlockPass) Attention() *mat.Dense {
	return mat.NewDense(bp.ac.n, bp.ac.d, append([]float64(nil), bp.ac.a...))
}

// MLP returns the MLP update m (n×d).
func (bp *BlockPass) MLP() *mat.Dense {
	return mat.NewDense(bp.ac.n, bp.ac.d, append([]float64(nil), bp.ac.m...))
}

// Backward returns dL/dX given dL/da and dL/dm (n×d each), adding the
// gradients of the block's parameters into g (of the parameters' shapes,
// as LayerGrads.Params.Block): dh = MLP's backward of dm, and
// dX = dh + the attention's backward of da + dh.
func (bp *BlockPass) Backward(g *BlockParams, da, dm *mat.Dense) *mat.Dense {
	c, ac := bp.c, bp.ac
	dh := mlpBackward(c, signed, bp.p, g, ac, rawRows(dm))
	dat := rawRows(da)
	for j := range dat {
		dat[j] += dh[j]
	}
	dx := attentionBackward(c, signed, bp.p, g, ac, dat)
	for j := range dx {
		dx[j] += dh[j]
	}
	return mat.NewDense(ac.n, ac.d, dx)
}
