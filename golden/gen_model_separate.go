package golden

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// separateModelRouting moves the routing decisions of a model or decode
// draw (p, in) apart, routed layer by routed layer in order, keeping each
// layer's selection: every routed token's router weight ends at least
// MinCaseGap above the row's decision boundary and every other token's at
// least MinCaseGap below it (under causal routing by the router, every
// weight at least MinCaseGap from 0), so that the gaps are at least
// 2·MinCaseGap. Unlike a layer case's input (separateRouting), a routed
// layer's input in a model is the residual stream the layers before it
// computed, which no input of the case moves token by token; so the
// router's own weights w move instead (separateRouter), which only that
// layer's routing and its router weights' multipliers read. It returns
// what it did, layer by layer. A layer's
// change moves the inputs of the layers after it, whose routing is
// separated after it. A routing the predictor decides, and the l2norm
// router, which has no weights, cannot be moved.
func separateModelRouting(s oracle.ModelSpec, p *ref.ModelParams, in ref.ModelInputs) (done []string, err error) {
	blk := s.Config.Block()
	x := ref.Embed(p, in.Tokens, in.Valid)
	for l, ml := range s.Config.Layers {
		if !ml.Routed {
			if x, err = ref.DenseLayerForward(blk, &p.Layers[l].Block, x, in.Valid); err != nil {
				return nil, fmt.Errorf("layer %d: %w", l, err)
			}
			continue
		}
		li := ref.LayerInputs{X: x, Valid: in.Valid}
		if in.Noise != nil {
			li.Noise = in.Noise[l]
		}
		if in.Jitter != nil {
			li.Jitter = in.Jitter[l]
		}
		sep, err := separateRouter(ml.Config, p.Layers[l], li)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		what := fmt.Sprintf("layer %d: %d tokens moved", l, sep.moved)
		if sep.scale != 1 {
			what = fmt.Sprintf("layer %d: router weights scaled by %.3g, then %d tokens moved", l, sep.scale, sep.moved)
		}
		done = append(done, what)
		res, err := ref.LayerForward(ml.Config, p.Layers[l], li)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		x = res.Out
	}
	return done, nil
}

// separateRouter moves the router weights r_i of one routed layer away
// from its decision boundary, keeping the decision. Under top-k routing
// the boundary of row b is t_b, midway between the k-th and (k+1)-th
// weight, and may move by an offset δ_b; under causal routing by the
// router it is 0 and stays. Every selected (causal: non-negative) token's
// weight must end at least MinCaseGap above the boundary and every other
// valid token's at least MinCaseGap below it.
//
// A linear router whose weights' spread over the valid tokens is below 1
// is first scaled up to 1, its bias with it (the decisions stay, but for
// jitter's): the draw's scale is the initialiser's (w ~ N(0, 1/d)), and a
// model's residual stream shares most of its direction between tokens, so
// that the weights of a later layer can crowd within a few hundredths of
// each other. When more tokens are near the boundary than w can move
// apart (below), the weights are scaled by 2, 4 and 8 times that in turn,
// which spreads the weights and thins the tokens near the boundary.
//
// The random router's noise moves token by token. A linear router's
// weights w are read by every token, and its inputs x_i share much of
// their direction (the residual stream's common part), so that moving one
// token's weight moves the others' too. So the tokens short of their bound
// are gathered into an active set A, and w moves by the least δw (in norm)
// that puts every active token exactly 1.5·MinCaseGap past its row's
// boundary t_b + δ_b: δw = Σ_{i∈A} c_i x_i with G·c − E·δ = Δ and Eᵀ·c = 0,
// G the Gram matrix x_i·x_j of A, E its tokens' rows, and Δ_i the move
// token i needs (without offsets under causal routing). Tokens the move
// brings short of their bound join A, and the solution is computed again,
// until none does; A at most half as large as x has coordinates. The
// decisions are those of the scaled weights.
func separateRouter(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) (sep routerSeparation, err error) {
	sep.scale = 1
	const gap, target = oracle.MinCaseGap, 1.5 * oracle.MinCaseGap
	switch {
	case cfg.Causal == spec.CausalPredictor:
		return sep, fmt.Errorf("causal routing %q: the predictor decides, and its gaps cannot be moved through the router", cfg.Causal)
	case cfg.Router == spec.RouterL2Norm:
		return sep, fmt.Errorf("router %q: it has no weights to move", cfg.Router)
	}
	r, err := ref.RouterWeights(cfg, p, in.X, in.Noise, in.Jitter)
	if err != nil {
		return sep, err
	}
	if cfg.Router == spec.RouterRandom {
		up, t, decided, err := routerBoundaries(cfg, r, in.Valid)
		if err != nil {
			return sep, err
		}
		for b, row := range r {
			for i := range oracle.ValidLen(in.Valid, b, len(row)) {
				if side := sideOf(up[b][i]); decided[b] && float64(side*(row[i]-t[b])) < gap {
					in.Noise[b][i] += float64(t[b]+float64(side*target)) - row[i]
					sep.moved++
				}
			}
		}
		return sep, nil
	}
	w0, b0 := slices.Clone(p.Router), slices.Clone(p.RouterBias)
	base := 1.0
	if sd := spread(r, in.Valid); sd > 0 && sd < 1 {
		base = 1 / sd
	}
	for _, f := range separateScales {
		sep.scale = float64(base * f)
		for j, v := range w0 {
			p.Router[j] = float64(sep.scale * v)
		}
		for j, v := range b0 {
			p.RouterBias[j] = float64(sep.scale * v)
		}
		if r, err = ref.RouterWeights(cfg, p, in.X, in.Noise, in.Jitter); err != nil {
			return sep, err
		}
		dw, moved, err := pushApart(cfg, r, in, len(p.Router))
		if errors.Is(err, errCrowded) {
			continue
		}
		if err != nil {
			return sep, err
		}
		for j, v := range dw {
			p.Router[j] += v
		}
		sep.moved = moved
		return sep, nil
	}
	return sep, fmt.Errorf("more tokens are within %g of the decision than the router weights can move apart, even scaled by %.3g", gap, sep.scale)
}

// separateScales are the factors separateRouter scales the router weights
// by, in turn, until the tokens near the decision are few enough to move.
var separateScales = []float64{1, 2, 4, 8}

// errCrowded is pushApart's error when more tokens are near the decision
// than the router weights can move.
var errCrowded = errors.New("too many tokens near the decision")

// sideOf is +1 for a token that must end above its boundary, −1 below.
func sideOf(up bool) float64 {
	if up {
		return 1
	}
	return -1
}

// pushApart returns separateRouter's δw for router weights r (of inputs
// in.X, d coordinates) and how many tokens it moved, or errCrowded.
func pushApart(cfg spec.Config, r [][]float64, in ref.LayerInputs, d int) ([]float64, int, error) {
	const gap, target = oracle.MinCaseGap, 1.5 * oracle.MinCaseGap
	up, t, decided, err := routerBoundaries(cfg, r, in.Valid)
	if err != nil {
		return nil, 0, err
	}
	rows, s := len(r), len(r[0])
	dw := make([]float64, d)
	offset := make([]float64, rows)
	var active []routerToken
	isActive := make([][]bool, rows)
	for b := range isActive {
		isActive[b] = make([]bool, s)
	}
	for {
		added := 0
		for b := range rows {
			if !decided[b] {
				continue
			}
			for i := range oracle.ValidLen(in.Valid, b, s) {
				if isActive[b][i] {
					continue
				}
				v := r[b][i] + ref.RouterLinearWeight(dw, in.X[b].RawRowView(i))
				if float64(sideOf(up[b][i])*(v-float64(t[b]+offset[b]))) < gap {
					isActive[b][i] = true
					active = append(active, routerToken{b: b, i: i})
					added++
				}
			}
		}
		if added == 0 {
			return dw, len(active), nil
		}
		if 2*len(active) > d {
			return nil, 0, errCrowded
		}
		want := make([]float64, len(active))
		for n, a := range active {
			want[n] = float64(t[a.b]+float64(sideOf(up[a.b][a.i])*target)) - r[a.b][a.i]
		}
		if dw, offset, err = leastMove(in.X, active, want, rows, cfg.Causal == spec.CausalOff); err != nil {
			return nil, 0, err
		}
	}
}

// routerSeparation is what separateRouter did to one routed layer: the
// factor its router weights were scaled by (1 if not), and how many
// tokens' weights it moved past the bounds.
type routerSeparation struct {
	scale float64
	moved int
}

// spread is the standard deviation of the valid router weights r (in
// float64, summed in order).
func spread(r [][]float64, valid []int) float64 {
	var n, sum float64
	for b, row := range r {
		for _, v := range row[:oracle.ValidLen(valid, b, len(row))] {
			sum += v
			n++
		}
	}
	mean := sum / n
	var ss float64
	for b, row := range r {
		for _, v := range row[:oracle.ValidLen(valid, b, len(row))] {
			ss += float64((v - mean) * (v - mean))
		}
	}
	return math.Sqrt(ss / n)
}

// routerToken is one token (row b, position i) of a layer.
type routerToken struct{ b, i int }

// routerBoundaries returns, for router weights r, which valid tokens are
// routed (up: selected, or under causal routing r ≥ 0), each row's
// boundary t_b (top-k: midway between the k-th and (k+1)-th weight;
// causal: 0), and whether the row decides anything (not k = 0 or k = V_b).
func routerBoundaries(cfg spec.Config, r [][]float64, valid []int) (up [][]bool, t []float64, decided []bool, err error) {
	rows, s := len(r), len(r[0])
	up, t, decided = make([][]bool, rows), make([]float64, rows), make([]bool, rows)
	if cfg.Causal == spec.CausalRouter {
		for b, row := range r {
			up[b] = make([]bool, s)
			for i, v := range row {
				up[b][i] = v >= 0
			}
			decided[b] = true
		}
		return up, t, decided, nil
	}
	k, err := ref.RowCapacities(cfg.Capacity, rows, s, valid)
	if err != nil {
		return nil, nil, nil, err
	}
	sel, err := ref.SelectTopK(r, k, valid)
	if err != nil {
		return nil, nil, nil, err
	}
	for b, pos := range sel.Rows {
		up[b] = make([]bool, s)
		for _, i := range pos {
			up[b][i] = true
		}
		v := oracle.ValidLen(valid, b, s)
		if k[b] == 0 || k[b] >= v {
			continue
		}
		lowIn, highOut := math.Inf(1), math.Inf(-1)
		for i, w := range r[b][:v] {
			if up[b][i] {
				lowIn = min(lowIn, w)
			} else {
				highOut = max(highOut, w)
			}
		}
		t[b], decided[b] = float64(lowIn+highOut)/2, true
	}
	return up, t, decided, nil
}

// leastMove returns the least δw (in norm) and row offsets δ with
// x_i·δw − δ_{b(i)} = want_i for every active token (rows of x), with
// the offsets 0 unless offsets; separateRouter says how.
func leastMove(x []*mat.Dense, active []routerToken, want []float64, rows int, offsets bool) ([]float64, []float64, error) {
	m := len(active)
	gram := make([][]float64, m)
	for a := range gram {
		gram[a] = make([]float64, m)
		xa := x[active[a].b].RawRowView(active[a].i)
		for c := range a + 1 {
			v := ref.RouterLinearWeight(xa, x[active[c].b].RawRowView(active[c].i))
			gram[a][c], gram[c][a] = v, v
		}
	}
	chol, err := cholesky(gram)
	if err != nil {
		return nil, nil, err
	}
	c := chol.solve(want)
	offset := make([]float64, rows)
	if offsets {
		// δ = −(Eᵀ G⁻¹ E)⁻¹ Eᵀ G⁻¹ Δ over the rows with active tokens,
		// then c = G⁻¹(Δ + E δ).
		var used []int
		for b := range rows {
			if slices.ContainsFunc(active, func(a routerToken) bool { return a.b == b }) {
				used = append(used, b)
			}
		}
		cols := make([][]float64, len(used)) // G⁻¹ e_b
		for n, b := range used {
			e := make([]float64, m)
			for a, tok := range active {
				if tok.b == b {
					e[a] = 1
				}
			}
			cols[n] = chol.solve(e)
		}
		sys := make([][]float64, len(used))
		rhs := make([]float64, len(used))
		for n, b := range used {
			sys[n] = make([]float64, len(used))
			for a, tok := range active {
				if tok.b != b {
					continue
				}
				rhs[n] -= c[a]
				for q := range used {
					sys[n][q] += cols[q][a]
				}
			}
		}
		chol2, err := cholesky(sys)
		if err != nil {
			return nil, nil, err
		}
		delta := chol2.solve(rhs)
		for n, b := range used {
			offset[b] = delta[n]
			for a := range c {
				c[a] += float64(delta[n] * cols[n][a])
			}
		}
	}
	_, d := x[0].Dims()
	dw := make([]float64, d)
	for a, tok := range active {
		for j, v := range x[tok.b].RawRowView(tok.i) {
			dw[j] += float64(c[a] * v)
		}
	}
	return dw, offset, nil
}

// lower is a Cholesky factor L (row-major, lower triangle) of a symmetric
// positive definite matrix A = L·Lᵀ.
type lower [][]float64

// cholesky factors a, or fails when a is not numerically positive
// definite (active tokens' inputs linearly dependent).
func cholesky(a [][]float64) (lower, error) {
	n := len(a)
	l := make(lower, n)
	for i := range n {
		l[i] = make([]float64, i+1)
		for j := range i + 1 {
			v := a[i][j]
			for k := range j {
				v -= float64(l[i][k] * l[j][k])
			}
			if i == j {
				if !(v > 1e-12*a[i][i]) {
					return nil, fmt.Errorf("the inputs of the tokens near the decision are linearly dependent: no move of the router weights separates them")
				}
				l[i][i] = math.Sqrt(v)
			} else {
				l[i][j] = v / l[j][j]
			}
		}
	}
	return l, nil
}

// solve returns A⁻¹·y by forward and back substitution.
func (l lower) solve(y []float64) []float64 {
	n := len(l)
	z := make([]float64, n)
	for i := range n {
		v := y[i]
		for k := range i {
			v -= float64(l[i][k] * z[k])
		}
		z[i] = v / l[i][i]
	}
	for i := n - 1; i >= 0; i-- {
		v := z[i]
		for k := i + 1; k < n; k++ {
			v -= float64(l[k][i] * z[k])
		}
		z[i] = v / l[i][i]
	}
	return z
}
