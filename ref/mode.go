package ref

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/spec"
)

// MoDEParams are the parameters of a Mixture-of-Depths-and-Experts layer
// (docs/spec.md §14). Weights are d_in×d_out (y = x·W).
type MoDEParams struct {
	// Block holds N1, the attention and N2; its W1, W2 and W3 are nil, the
	// experts own the MLPs.
	Block BlockParams
	// Router is the staged form's MoD router w (length d); nil for the
	// integrated form.
	Router []float64
	// Gate is the expert router W_g, d×(E + no-op experts).
	Gate *mat.Dense
	// Experts holds expert e's MLP in W1, W2 (and W3 for SwiGLU); the other
	// fields are nil.
	Experts []BlockParams
}

// NewMoDEParams draws a MoDE layer's parameters in the order of Tensors:
// N1, the attention and N2 as NewBlockParams draws them, the staged form's
// router w ~ N(0, 1/d), the gate W_g ~ N(0, 1/d), then each expert's MLP
// N(0, 1/d_in).
func NewMoDEParams(c spec.MoDEConfig, rng *rand.Rand) *MoDEParams {
	d, f := c.Block.D, c.Block.DFF
	sd, sf := 1/math.Sqrt(float64(d)), 1/math.Sqrt(float64(f))
	p := &MoDEParams{}
	drawNormsAndAttention(c.Block, &source{rng: rng}, &p.Block)
	if c.Form == spec.MoDEStaged {
		p.Router = RandomVector(rng, d, 0, sd)
	}
	p.Gate = RandomMatrix(rng, d, c.GateWidth(), sd)
	for range c.Experts {
		var e BlockParams
		e.W1 = RandomMatrix(rng, d, f, sd)
		e.W2 = RandomMatrix(rng, f, d, sf)
		if c.Block.MLP == spec.ActSwiGLU {
			e.W3 = RandomMatrix(rng, d, f, sd)
		}
		p.Experts = append(p.Experts, e)
	}
	return p
}

// NewMoDERoutingParams draws what decides a MoDE layer's routing as
// NewMoDEParams draws it from the same rng (N1, the attention, N2, the
// staged form's router and the gate: the same values) and leaves out the
// experts, skipping their draws (skipNormals): rng ends where NewMoDEParams
// leaves it, so that what is drawn from it next is the same. MoDERoute on
// these parameters decides what MoDEForward on NewMoDEParams' decides, at a
// fraction of the drawing: a generator that redraws a case until its
// routing is clear of ties tries each draw this way.
func NewMoDERoutingParams(c spec.MoDEConfig, rng *rand.Rand) *MoDEParams {
	d, f := c.Block.D, c.Block.DFF
	sd := 1 / math.Sqrt(float64(d))
	p := &MoDEParams{}
	drawNormsAndAttention(c.Block, &source{rng: rng}, &p.Block)
	if c.Form == spec.MoDEStaged {
		p.Router = RandomVector(rng, d, 0, sd)
	}
	p.Gate = RandomMatrix(rng, d, c.GateWidth(), sd)
	mlps := 2 // W1, W2 (and W3 for SwiGLU) of d·f values each
	if c.Block.MLP == spec.ActSwiGLU {
		mlps = 3
	}
	skipNormals(rng, c.Experts*mlps*d*f)
	return p
}

// ExpertPrefix is the name prefix of expert e's parameters: "Expert<e>.".
func ExpertPrefix(e int) string { return "Expert" + strconv.Itoa(e) + "." }

// Tensors lists the layer's parameters, prefixed by prefix, in a fixed
// order: Norm1 (and Norm1Bias), Wq, Wk, Wv, Wo, Norm2 (and Norm2Bias),
// Router (staged), Gate, then Expert<e>.W1, .W2 (and .W3) for each expert.
func (p *MoDEParams) Tensors(prefix string) []Tensor {
	ts := p.Block.Tensors(prefix)
	ts = appendVec(ts, prefix+"Router", p.Router)
	ts = appendMat(ts, prefix+"Gate", p.Gate)
	for e := range p.Experts {
		ts = append(ts, p.Experts[e].Tensors(prefix+ExpertPrefix(e))...)
	}
	return ts
}

// Check reports the first parameter whose presence or shape does not match
// the configuration.
func (p *MoDEParams) Check(c spec.MoDEConfig) error {
	if err := p.checkRouting(c); err != nil {
		return err
	}
	d, f := c.Block.D, c.Block.DFF
	if len(p.Experts) != c.Experts {
		return fmt.Errorf("params: %d experts, want E = %d", len(p.Experts), c.Experts)
	}
	for e := range p.Experts {
		ex := &p.Experts[e]
		if ex.Norm1 != nil || ex.Wq != nil || ex.Wk != nil || ex.Wv != nil || ex.Wo != nil || ex.Norm2 != nil || ex.Norm1Bias != nil || ex.Norm2Bias != nil ||
			ex.Bq != nil || ex.Bk != nil || ex.Bv != nil {
			return fmt.Errorf("params: expert %d has norm or attention parameters; an expert is an MLP only", e)
		}
		for _, err := range []error{
			checkMat(ExpertPrefix(e)+"W1", ex.W1, d, f, true),
			checkMat(ExpertPrefix(e)+"W2", ex.W2, f, d, true),
			checkMat(ExpertPrefix(e)+"W3", ex.W3, d, f, c.Block.MLP == spec.ActSwiGLU),
		} {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRouting is Check of the parameters that decide the routing: N1,
// the attention, N2, the router and the gate (and no MLP in Block).
func (p *MoDEParams) checkRouting(c spec.MoDEConfig) error {
	d, f := c.Block.D, c.Block.DFF
	ln := c.Block.Norm == spec.NormLayer
	b := &p.Block
	errs := []error{
		checkVec("Norm1", b.Norm1, d, true),
		checkVec("Norm1Bias", b.Norm1Bias, d, ln),
		checkMat("Wq", b.Wq, d, d, true),
		checkMat("Wk", b.Wk, d, c.Block.KVWidth(), true),
		checkMat("Wv", b.Wv, d, c.Block.KVWidth(), true),
		checkVec("Bq", b.Bq, d, c.Block.QKVBias),
		checkVec("Bk", b.Bk, c.Block.KVWidth(), c.Block.QKVBias),
		checkVec("Bv", b.Bv, c.Block.KVWidth(), c.Block.QKVBias),
		checkMat("Wo", b.Wo, d, d, true),
		checkVec("Norm2", b.Norm2, d, true),
		checkVec("Norm2Bias", b.Norm2Bias, d, ln),
		checkMat("W1", b.W1, d, f, false),
		checkMat("W2", b.W2, f, d, false),
		checkMat("W3", b.W3, d, f, false),
		checkVec("Router", p.Router, d, c.Form == spec.MoDEStaged),
		checkMat("Gate", p.Gate, d, c.GateWidth(), true),
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// MoDEFrozen is a MoDE layer's routing decision, the counterpart of Frozen:
// with it fixed, the forward (MoDEForwardFrozen) is a smooth function of the
// parameters and of X.
type MoDEFrozen struct {
	// Selection is the staged form's MoD selection; in the integrated form
	// every position of every row.
	Selection Selection
	// Experts[b][e] lists, in ascending order, the positions (in the
	// sequence, not in the gathered subset) that expert e chose in row b;
	// experts E, E+1, … are the integrated form's no-op experts.
	Experts [][][]int
}

// MoDEResult is everything a MoDE layer computes.
type MoDEResult struct {
	// Out is the layer output, B matrices S×d.
	Out []*mat.Dense
	// RouterWeights are the staged form's MoD router weights r (B×S); nil
	// for the integrated form.
	RouterWeights [][]float64
	// Selection is the staged form's selection (every position for the
	// integrated form).
	Selection Selection
	// Gates[b][i] is the softmax over the experts of token i's gate logits,
	// E (+ no-op) values; all 0 at a position the staged router skipped.
	Gates [][][]float64
	// ExpertCapacity is k_e per row (docs/spec.md §14).
	ExpertCapacity []int
	// Experts is the expert choice, as MoDEFrozen.Experts.
	Experts [][][]int
	// FLOPs is the layer's forward FLOPs and its dense twin's.
	FLOPs LayerFLOPs
	// Frozen is the decision to replay with MoDEForwardFrozen.
	Frozen MoDEFrozen
}

// ExpertCapacity is k_e of docs/spec.md §14: clamp(FloorRobust(c_e·n), 1, n)
// tokens per expert in a row of n tokens (0 when n = 0).
func ExpertCapacity(ce float64, n int) int {
	if n == 0 {
		return 0
	}
	return clampInt(FloorRobust(float64(ce*float64(n))), 1, n)
}

// ExpertChoice is expert-choice routing (docs/spec.md §14): gates holds one
// row per token of n tokens, one column per expert; expert e takes the k
// tokens with the largest gate for it, ties broken in favour of the lower
// index, listed in ascending order. A NaN gate is an error naming token and
// expert.
func ExpertChoice(gates [][]float64, k int) ([][]int, error) {
	n := len(gates)
	if n == 0 {
		return nil, nil
	}
	width := len(gates[0])
	cols := make([][]float64, width)
	ks := make([]int, width)
	for e := range cols {
		cols[e] = make([]float64, n)
		for t, g := range gates {
			if len(g) != width {
				return nil, fmt.Errorf("expert choice: token %d has %d gates, want %d", t, len(g), width)
			}
			cols[e][t] = g[e]
		}
		ks[e] = k
	}
	if err := checkNoNaN("gate (row = expert, position = token)", cols, nil); err != nil {
		return nil, fmt.Errorf("expert choice: %w", err)
	}
	sel, err := SelectTopK(cols, ks, nil)
	if err != nil {
		return nil, fmt.Errorf("expert choice: %w", err)
	}
	return sel.Rows, nil
}

// checkMoDE validates the configuration, the parameters (the experts'
// only if experts) and the input.
func checkMoDE(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, experts bool) (rows, s int, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, err
	}
	if p == nil {
		return 0, 0, fmt.Errorf("mode: params are nil")
	}
	check := p.checkRouting
	if experts {
		check = p.Check
	}
	if err := check(cfg); err != nil {
		return 0, 0, fmt.Errorf("mode: %w", err)
	}
	rows, s, err = batchShape("MoDE input X", x, cfg.Block.D)
	if err != nil {
		return 0, 0, fmt.Errorf("mode: %w", err)
	}
	return rows, s, nil
}

// modeRouterWeights returns the staged form's r_i = w·x_i (nil for the
// integrated form).
func modeRouterWeights(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense) [][]float64 {
	if cfg.Form != spec.MoDEStaged {
		return nil
	}
	r := make([][]float64, len(x))
	for b, xb := range x {
		s, _ := xb.Dims()
		r[b] = make([]float64, s)
		for i := range s {
			r[b][i] = RouterLinearWeight(p.Router, xb.RawRowView(i))
		}
	}
	return r
}

// moDERow is the attention half and the gates of one row: the computed
// tokens' positions pos, a = Attn(N1(X~)) over them, u = N2(X~ + a) and the
// softmax gates G = softmax(u·W_g).
type moDERow struct {
	pos   []int
	a     [][]float64
	uf    []float64 // n×d, u of the n computed tokens
	gates [][]float64
}

// modeAttend computes a row's moDERow for the tokens at positions pos.
func modeAttend(cfg spec.MoDEConfig, p *MoDEParams, x *mat.Dense, pos []int) (moDERow, error) {
	row := moDERow{pos: pos}
	if len(pos) == 0 {
		return row, nil
	}
	xs := GatherRows(x, pos)
	a, err := AttentionUpdate(cfg.Block, &p.Block, xs, pos)
	if err != nil {
		return row, err
	}
	n, d := len(pos), cfg.Block.D
	h := make([]float64, n*d) // n×d, X~ + a
	for t := range pos {
		for j := 0; j < d; j++ {
			h[t*d+j] = xs.At(t, j) + a.At(t, j)
		}
	}
	u, _ := normRows(cfg.Block, p.Block.Norm2, p.Block.Norm2Bias, h, n, d)
	_, width := p.Gate.Dims()
	z := mulRows(u, n, p.Gate) // n×width, the gate logits u·W_g
	for t := range pos {
		row.a = append(row.a, a.RawRowView(t))
		row.gates = append(row.gates, Softmax(z[t*width:(t+1)*width]))
	}
	row.uf = u
	return row, nil
}

// MoDEForward is a Mixture-of-Depths-and-Experts layer (docs/spec.md §14)
// on B rows of S×d, without padding: the staged form's MoD selection (top-k
// of r = w·x with capacity ratio c), the gates, the expert choice with
// capacity k_e, then MoDEForwardFrozen's output with that decision.
func MoDEForward(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense) (*MoDEResult, error) {
	r, fz, _, err := modeRoute(cfg, p, x, true)
	if err != nil {
		return nil, err
	}
	return modeApply(cfg, p, x, r, fz)
}

// MoDERoute is MoDEForward's routing alone: the result's router weights,
// selection, gates, expert capacities, expert choice and Frozen are
// MoDEForward's, its Out and FLOPs are left unset, and no expert runs: p's
// experts are neither checked nor read, and may be left out
// (NewMoDERoutingParams).
func MoDERoute(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense) (*MoDEResult, error) {
	r, fz, gated, err := modeRoute(cfg, p, x, false)
	if err != nil {
		return nil, err
	}
	res := &MoDEResult{RouterWeights: r, Selection: fz.Selection, Experts: fz.Experts, Frozen: fz,
		ExpertCapacity: make([]int, len(x))}
	s, _ := x[0].Dims()
	for b, row := range gated {
		if len(fz.Experts[b]) > 0 {
			res.ExpertCapacity[b] = len(fz.Experts[b][0])
		}
		res.Gates = append(res.Gates, row.gatesAt(s, cfg.GateWidth()))
	}
	return res, nil
}

// gatesAt is the row's gates at every one of its s positions: width
// values each, 0 at a position not computed.
func (row moDERow) gatesAt(s, width int) [][]float64 {
	gates := make([][]float64, s)
	for i := range gates {
		gates[i] = make([]float64, width)
	}
	for t, i := range row.pos {
		copy(gates[i], row.gates[t])
	}
	return gates
}

// modeRoute decides a MoDE layer's routing: the staged form's router
// weights r (nil for the integrated form), the decision fz, and each row's
// attention half and gates. It checks p's experts only if experts.
func modeRoute(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, experts bool) ([][]float64, MoDEFrozen, []moDERow, error) {
	rows, s, err := checkMoDE(cfg, p, x, experts)
	if err != nil {
		return nil, MoDEFrozen{}, nil, err
	}
	r := modeRouterWeights(cfg, p, x)
	fz := MoDEFrozen{Selection: Selection{S: s, Rows: make([][]int, rows)}}
	for b := range rows {
		fz.Selection.Rows[b] = iota(s)
	}
	if r != nil {
		k, err := CapacityFromRatio(cfg.Capacity, s)
		if err != nil {
			return nil, fz, nil, fmt.Errorf("mode: %w", err)
		}
		ks := make([]int, rows)
		for b := range ks {
			ks[b] = k
		}
		if fz.Selection, err = SelectTopK(r, ks, nil); err != nil {
			return nil, fz, nil, fmt.Errorf("mode: %w", err)
		}
	}
	gated := make([]moDERow, rows)
	for b := range rows {
		row, err := modeAttend(cfg, p, x[b], fz.Selection.Rows[b])
		if err != nil {
			return nil, fz, nil, fmt.Errorf("mode: row %d: %w", b, err)
		}
		gated[b] = row
		choice, err := ExpertChoice(row.gates, ExpertCapacity(cfg.ExpertCapacity, len(row.pos)))
		if err != nil {
			return nil, fz, nil, fmt.Errorf("mode: row %d: %w", b, err)
		}
		// Indices into the computed tokens become positions in the row.
		for _, c := range choice {
			for j, t := range c {
				c[j] = row.pos[t]
			}
		}
		fz.Experts = append(fz.Experts, choice)
	}
	return r, fz, gated, nil
}

// MoDEForwardFrozen is a MoDE layer with the routing decision taken from fz
// (docs/spec.md §14). For a computed token i (every token in the integrated
// form, a selected one in the staged form) with attention update a_i,
// u_i = N2(x_i + a_i) and gates G_i = softmax(u_i·W_g), the expert update is
//
//	m_i = Σ_{e < E chose i} G_ie · MLP_e(u_i)
//
// summed in expert order; no-op experts add nothing. Staged:
// out_i = x_i + r_i (a_i + m_i) for a selected i, x_i otherwise.
// Integrated: out_i = x_i + a_i + m_i. Use it for finite-difference
// gradients.
func MoDEForwardFrozen(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, fz MoDEFrozen) (*MoDEResult, error) {
	rows, s, err := checkMoDE(cfg, p, x, true)
	if err != nil {
		return nil, err
	}
	if fz.Selection.S != s {
		return nil, fmt.Errorf("mode: frozen selection is for S = %d, input has S = %d", fz.Selection.S, s)
	}
	if err := fz.Selection.Validate(rows, nil); err != nil {
		return nil, fmt.Errorf("mode: frozen %w", err)
	}
	if cfg.Form == spec.MoDEIntegrated {
		for b, sel := range fz.Selection.Rows {
			if len(sel) != s {
				return nil, fmt.Errorf("mode: frozen selection row %d has %d positions; the integrated form computes every one of S = %d", b, len(sel), s)
			}
		}
	}
	if len(fz.Experts) != rows {
		return nil, fmt.Errorf("mode: frozen expert choice has %d rows, want B = %d", len(fz.Experts), rows)
	}
	for b, ch := range fz.Experts {
		if len(ch) != cfg.GateWidth() {
			return nil, fmt.Errorf("mode: frozen expert choice row %d has %d experts, want %d", b, len(ch), cfg.GateWidth())
		}
		in := make(map[int]bool)
		for _, i := range fz.Selection.Rows[b] {
			in[i] = true
		}
		for e, c := range ch {
			for j, i := range c {
				if !in[i] || (j > 0 && i <= c[j-1]) {
					return nil, fmt.Errorf("mode: frozen expert choice row %d expert %d: positions %v are not ascending computed positions", b, e, c)
				}
			}
		}
	}
	return modeApply(cfg, p, x, modeRouterWeights(cfg, p, x), fz)
}

// modeExperts runs each expert e < E on the computed tokens it chose
// (choice[e], positions; pos lists the computed tokens' positions, u is
// their N2 output, n×d, gates their gates, one row per token), as one
// matrix per expert, and returns the experts' values (nil for no-op experts
// and experts with no token) and m_t = Σ_e G_te·MLP_e(u_t) (n×d), summed in
// expert order.
func modeExperts(cfg spec.MoDEConfig, p *MoDEParams, choice [][]int, pos []int, u []float64, gates [][]float64) ([]*blockActs, []float64) {
	d := cfg.Block.D
	index := make(map[int]int, len(pos))
	for t, i := range pos {
		index[i] = t
	}
	experts := make([]*blockActs, len(choice))
	m := make([]float64, len(pos)*d)
	for e, c := range choice {
		if e >= cfg.Experts || len(c) == 0 {
			continue // a no-op expert: f = 0
		}
		ea := &blockActs{n: len(c), d: d, dff: cfg.Block.DFF, u2: make([]float64, len(c)*d)}
		for k, i := range c {
			copy(ea.u2[k*d:(k+1)*d], u[index[i]*d:(index[i]+1)*d])
		}
		mlpCore(cfg.Block, &p.Experts[e], ea)
		experts[e] = ea
		for k, i := range c {
			t := index[i]
			g := gates[t][e]
			for j, y := range ea.m[k*d : (k+1)*d] {
				m[t*d+j] += float64(g * y)
			}
		}
	}
	return experts, m
}

// modeApply computes the output for the decision fz and router weights r.
func modeApply(cfg spec.MoDEConfig, p *MoDEParams, x []*mat.Dense, r [][]float64, fz MoDEFrozen) (*MoDEResult, error) {
	rows := len(x)
	s, d := x[0].Dims()
	res := &MoDEResult{RouterWeights: r, Selection: fz.Selection, Experts: fz.Experts, Frozen: fz,
		ExpertCapacity: make([]int, rows)}
	var lengths, computed []int
	for b := range rows {
		row, err := modeAttend(cfg, p, x[b], fz.Selection.Rows[b])
		if err != nil {
			return nil, fmt.Errorf("mode: row %d: %w", b, err)
		}
		_, m := modeExperts(cfg, p, fz.Experts[b], row.pos, row.uf, row.gates)
		if len(fz.Experts[b]) > 0 {
			res.ExpertCapacity[b] = len(fz.Experts[b][0])
		}
		gates := row.gatesAt(s, cfg.GateWidth())
		out := mat.DenseCopyOf(x[b])
		for t, i := range row.pos {
			for j := range d {
				if cfg.Form == spec.MoDEStaged {
					out.Set(i, j, x[b].At(i, j)+float64(r[b][i]*(row.a[t][j]+m[t*d+j])))
				} else {
					out.Set(i, j, x[b].At(i, j)+row.a[t][j]+m[t*d+j])
				}
			}
		}
		res.Out = append(res.Out, out)
		res.Gates = append(res.Gates, gates)
		lengths = append(lengths, s)
		computed = append(computed, len(row.pos))
	}
	res.FLOPs = MoDELayerFLOPs(cfg, lengths, computed, res.ExpertCapacity)
	return res, nil
}
