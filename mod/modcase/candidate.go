package modcase

import (
	"fmt"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/nn"
)

// Candidate runs mod on a golden case's inputs and parameters and returns
// every array the case judges, under the candidate names of
// docs/golden-format.md (the expected.* names without the prefix, and the
// grad.* names), for judge.Compare: this is what `modref check` runs when it
// is given no candidate. Float arrays are float32 values (dtype <f4).
func Candidate(c *format.Case) (map[string]*format.Array, error) {
	return candidate(c, emulation{})
}

// emulation is how an emulated implementation differs from mod's own
// float32 arithmetic (Emulate).
type emulation struct {
	// rnd is the tape's rounding of products.
	rnd autograd.Rounding
	// angles32 computes the rotary angles in float32
	// (nn.RoPE.Float32Angles).
	angles32 bool
	// free, when set, holds the arrays of members already measured, for
	// widen to write into (eachMember's recycling); nil allocates.
	free *freeFloats
	// tape, when set, is the tape of the member before, whose tensors
	// nothing reads any more (every array a run returns is a copy): reset
	// and reused instead of a new tape's fresh memory.
	tape *autograd.Tape
	// layer, when set, holds the layer case's mod layer and inputs built
	// for the member before (eachMember): the same values for every
	// member, rebuilt only for another case.
	layer *caseLayer
}

// caseLayer is a layer case's mod layer, inputs and upstream gradient,
// built once for the members of a family; each run zeroes the gradients
// the one before accumulated.
type caseLayer struct {
	c  *format.Case
	l  *mod.Layer
	in mod.LayerInputs
	u  []float32
	// src and run are the case the family runs on and its copy with the
	// inputs rounded to the profile's storage format (emulate), made once.
	src, run *format.Case
}

// layerFromCase is LayerFromCase of c and its upstream gradient in
// float32, from em.layer where it holds c's, their gradients zeroed.
func (em emulation) layerFromCase(c *format.Case) (*mod.Layer, mod.LayerInputs, []float32, error) {
	cl := em.layer
	if cl != nil && cl.c == c {
		for _, p := range cl.l.Params("") {
			p.T.ZeroGrad()
		}
		cl.in.X.ZeroGrad()
		return cl.l, cl.in, cl.u, nil
	}
	l, in, err := LayerFromCase(c)
	if err != nil {
		return nil, mod.LayerInputs{}, nil, err
	}
	u, ok := c.Arrays["upstream.out"]
	if !ok || len(u.F) != in.X.Len() {
		return nil, mod.LayerInputs{}, nil, fmt.Errorf("upstream.out is missing or does not match input.x (%dx%d)", in.X.Rows, in.X.Cols)
	}
	u32 := to32(u.F)
	if cl != nil {
		*cl = caseLayer{c: c, l: l, in: in, u: u32}
	}
	return l, in, u32, nil
}

// newTape returns em's tape reset, or a new one, rounding as em says.
func (em emulation) newTape() *autograd.Tape {
	tp := em.tape
	if tp == nil {
		tp = new(autograd.Tape)
	}
	tp.Reset()
	tp.SetRounding(em.rnd)
	return tp
}

// freeFloats is a free list of float64 slices by length: the arrays of a
// family's member once measured, which the next member's arrays are
// written into instead of fresh memory (at d = 512, S = 2048, B = 3 about
// 75 MB a member).
type freeFloats struct{ byLen map[int][][]float64 }

// get returns a slice of n values, from the list if it holds one (its
// values stale: the caller writes every one), or a new one.
func (f *freeFloats) get(n int) []float64 {
	if f == nil || len(f.byLen[n]) == 0 {
		return make([]float64, n)
	}
	l := f.byLen[n]
	v := l[len(l)-1]
	f.byLen[n] = l[:len(l)-1]
	return v
}

// put adds the float arrays of a member that nothing reads any more to
// the list.
func (f *freeFloats) put(arrays map[string]*format.Array) {
	if f.byLen == nil {
		f.byLen = map[int][][]float64{}
	}
	for _, a := range arrays {
		if a.F != nil {
			f.byLen[len(a.F)] = append(f.byLen[len(a.F)], a.F)
		}
	}
}

// setAngles sets a block's rotary angles (if it has them) to em's.
func (em emulation) setAngles(b *nn.Block) {
	if b.Attn.RoPE != nil {
		b.Attn.RoPE.Float32Angles = em.angles32
	}
}

// candidate is Candidate computed as the emulation em says.
func candidate(c *format.Case, em emulation) (map[string]*format.Array, error) {
	var got map[string]any
	var err error
	switch c.Manifest.Kind {
	case format.KindLayer:
		got, err = runLayerCase(c, em)
	case format.KindMoDE:
		got, err = runMoDECase(c, em)
	default:
		got, err = runModelCase(c, em)
	}
	if err != nil {
		return nil, fmt.Errorf("mod: case %s: %w", c.Manifest.Name, err)
	}
	cand := make(map[string]*format.Array)
	for _, info := range c.Manifest.Arrays {
		if info.Role != format.RoleExpected {
			continue
		}
		v, ok := got[info.Name]
		if !ok {
			continue // Compare reports it missing
		}
		name := format.CandidateName(info.Name)
		if sel, ok := v.(selection); ok {
			cand[name] = sel.array()
			continue
		}
		f, _ := v.([]float64)
		if f == nil {
			continue // not computed by this configuration; Compare reports it missing
		}
		if len(f) != sizeOf(info.Shape) {
			return nil, fmt.Errorf("mod: case %s: %s has %d values, the case %v", c.Manifest.Name, name, len(f), info.Shape)
		}
		if info.DType == "<i8" {
			ints := make([]int64, len(f))
			for i, x := range f {
				ints[i] = int64(x)
			}
			cand[name] = &format.Array{Shape: info.Shape, I: ints, DType: "<i8"}
		} else {
			cand[name] = &format.Array{Shape: info.Shape, F: f, DType: "<f4"}
		}
	}
	return cand, nil
}

func sizeOf(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// selection is a routing decision as positions per row.
type selection [][]int

// array is the selection as the corpus stores it: B×k_max ascending
// positions, −1 where a row has fewer.
func (s selection) array() *format.Array {
	kmax := 1
	for _, p := range s {
		kmax = max(kmax, len(p))
	}
	out := make([]int64, 0, len(s)*kmax)
	for _, p := range s {
		for j := range kmax {
			v := int64(-1)
			if j < len(p) {
				v = int64(p[j])
			}
			out = append(out, v)
		}
	}
	return &format.Array{Shape: []int{len(s), kmax}, I: out, DType: "<i8"}
}

// runLayerCase computes every array a layer case judges: the forward values
// and the gradients of sum(upstream.out * out) + aux.total.
func runLayerCase(c *format.Case, em emulation) (map[string]any, error) {
	l, in, u, err := em.layerFromCase(c)
	if err != nil {
		return nil, err
	}
	em.setAngles(l.Block())
	tp := em.newTape()
	res, err := l.Forward(tp, in)
	if err != nil {
		return nil, err
	}
	got := map[string]any{
		"expected.out":                em.widen(res.Out.Data),
		"expected.router_logits":      em.widen(res.RouterLogits),
		"expected.selected":           selection(res.Selected),
		"expected.weights":            em.widen(res.Weights),
		"expected.multipliers":        em.widen(res.Multipliers),
		"expected.targets":            em.widen(res.Targets),
		"expected.predictor_logits":   em.widen(res.PredictorLogits),
		"expected.predictor_accuracy": []float64{res.PredictorAccuracy},
		"expected.aux.router_bce":     []float64{res.RouterBCE},
		"expected.aux.predictor_bce":  []float64{res.PredictorBCE},
		"expected.aux.load_balance":   []float64{res.LoadBalance},
		"expected.aux.total":          []float64{res.Aux},
	}
	if len(u) != res.Out.Len() {
		return nil, fmt.Errorf("upstream.out is missing or does not match out (%dx%d)", res.Out.Rows, res.Out.Cols)
	}
	loss := tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, u)))
	if res.AuxLoss != nil {
		loss = tp.Add(loss, res.AuxLoss)
	}
	got["expected.loss"] = []float64{float64(loss.Data[0])}
	tp.Backward(loss)
	got["grad.input.x"] = em.widen(in.X.Grad)
	for _, p := range l.Params("") {
		got["grad.param."+p.Name] = em.widen(p.T.Grad)
	}
	return got, nil
}

// runMoDECase computes every array a mode case judges: the forward values,
// the decision and the gradients of sum(upstream.out * out).
func runMoDECase(c *format.Case, em emulation) (map[string]any, error) {
	l, x, err := MoDEFromCase(c)
	if err != nil {
		return nil, err
	}
	em.setAngles(l.Block())
	rows, s := c.Manifest.Config.Batch, c.Manifest.Config.SeqLen
	tp := em.newTape()
	res, err := l.Forward(tp, x, rows, s)
	if err != nil {
		return nil, err
	}
	var choice []float64
	for _, row := range res.Frozen.Experts {
		for _, ch := range row {
			for _, i := range ch {
				choice = append(choice, float64(i))
			}
		}
	}
	got := map[string]any{
		"expected.out":           em.widen(res.Out.Data),
		"expected.router_logits": em.widen(res.RouterLogits),
		"expected.selected":      selection(res.Frozen.Selected),
		"expected.gates":         em.widen(res.Gates),
		"expected.expert_choice": choice,
	}
	u, ok := c.Arrays["upstream.out"]
	if !ok || len(u.F) != res.Out.Len() {
		return nil, fmt.Errorf("upstream.out is missing or does not match out (%dx%d)", res.Out.Rows, res.Out.Cols)
	}
	loss := tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, to32(u.F))))
	got["expected.loss"] = []float64{float64(loss.Data[0])}
	tp.Backward(loss)
	got["grad.input.x"] = em.widen(x.Grad)
	for _, p := range l.Params("") {
		got["grad.param."+p.Name] = em.widen(p.T.Grad)
	}
	return got, nil
}

// runModelCase computes every array a model or decode case judges.
func runModelCase(c *format.Case, em emulation) (map[string]any, error) {
	m, in, err := ModelFromCase(c)
	if err != nil {
		return nil, err
	}
	for l := range m.Layers {
		em.setAngles(m.Block(l))
	}
	tp := em.newTape()
	res, err := m.Forward(tp, in)
	if err != nil {
		return nil, err
	}
	got := map[string]any{
		"expected.logits": em.widen(res.Logits.Data),
		"expected.ce":     []float64{res.CE},
		"expected.loss":   []float64{float64(res.Loss.Data[0])},
	}
	for l, lr := range res.Layers {
		if lr == nil {
			continue
		}
		pre := fmt.Sprintf("expected.L%d.", l)
		got[pre+"router_logits"] = em.widen(lr.RouterLogits)
		got[pre+"selected"] = selection(lr.Selected)
		got[pre+"predictor_logits"] = em.widen(lr.PredictorLogits)
		got[pre+"aux.total"] = []float64{lr.Aux}
		got[pre+"weights"] = em.widen(lr.Weights)
		got[pre+"multipliers"] = em.widen(lr.Multipliers)
		got[pre+"targets"] = em.widen(lr.Targets)
		got[pre+"out"] = em.widen(lr.Out.Data)
	}
	if c.Manifest.Kind == format.KindDecode {
		return got, decodeCase(c, m, in, got)
	}
	tp.Backward(res.Loss)
	for _, p := range m.Params() {
		got["grad.param."+p.Name] = em.widen(p.T.Grad)
	}
	return got, nil
}

// decodeCase decodes every sequence token by token and adds the decoded
// logits and per-layer routing decisions to got.
func decodeCase(c *format.Case, m *mod.Model, in mod.ModelInputs, got map[string]any) error {
	rows, s, vocab := c.Manifest.Config.Batch, c.Manifest.Config.SeqLen, m.Config().Vocab
	logits := make([]float64, rows*s*vocab)
	routed := make([][]float64, len(m.Layers))
	for l := range routed {
		routed[l] = make([]float64, rows*s)
	}
	for b := range rows {
		dec, err := mod.NewDecoder(m)
		if err != nil {
			return err
		}
		for i := range in.Valid[b] {
			st, err := dec.Step(in.Tokens[b][i])
			if err != nil {
				return err
			}
			for j, v := range st.Logits {
				logits[(b*s+i)*vocab+j] = float64(v)
			}
			for l, r := range st.Routed {
				if r {
					routed[l][b*s+i] = 1
				}
			}
		}
	}
	got["expected.decode_logits"] = logits
	for l := range routed {
		got[fmt.Sprintf("expected.L%d.routed", l)] = routed[l]
	}
	return nil
}

// widen converts float32 values to float64 (nil stays nil), into a slice
// of em's free list where it has one of that length.
func (em emulation) widen(v []float32) []float64 {
	if v == nil {
		return nil
	}
	out := em.free.get(len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// to32 rounds float64 values to float32.
func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
