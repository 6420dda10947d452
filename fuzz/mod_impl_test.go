package fuzz

import (
	"fmt"
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// Impls are the implementations every applicable property runs on: ref/
// (float64) and mod/ (float32).
var Impls = []Impl{Ref, Mod}

// Mod is mod/ as an Impl. Its inputs and parameters are rounded to float32
// (mod.LoadParams rounds parameters; the adapter rounds X, noise and jitter)
// and its float32 results widened to float64 exactly, so a property that
// compares mod's output with mod's own output, or with an input drawn as a
// float32 value (Float32: the generators round for it), compares float32
// values bit for bit.
//
//   - SelectTopK is mod.SelectTopK on each row's first V_b weights, rounded
//     to float32, with the row named in an error as mod's layer names it.
//   - Layer loads ref's parameters into a mod layer (modcase.LayerFromRef)
//     and runs Layer.Forward; the result carries Out, Selection, RouterWeights,
//     Capacity, Weights, Multipliers, Targets, PredictorLogits, the losses,
//     Routed and Skipped, and Frozen (mod's LayerResult.Frozen: Selection,
//     TopK, STEOffset and PredictorInput, widened).
//   - SelectCausal is mod.SelectCausal the same way.
//   - LayerFrozen is Layer.ForwardFrozen with ref's Frozen rounded to
//     float32 (modcase.FrozenFromRef), read again at every call, so a
//     PredictorInput aliasing X follows X's changes.
//   - Model and NewDecoder load ref's model parameters into a mod model
//     (modcase.ModelFromRef);
//     the model result carries Logits, CE, Aux and per routed layer the
//     layer result as above without Out.
var Mod = Impl{
	Name:         "mod",
	Float32:      true,
	SelectTopK:   modSelectTopK,
	SelectCausal: modSelectCausal,
	Layer:        modLayer,
	LayerFrozen:  modLayerFrozen,
	Model:        modModel,
	NewDecoder:   modNewDecoder,
}

// modSelectTopK is mod's top-k selection row by row (see Mod).
func modSelectTopK(r [][]float64, k []int, valid []int) (ref.Selection, error) {
	rows := len(r)
	sel := ref.Selection{Rows: make([][]int, rows)}
	if rows == 0 {
		return sel, nil
	}
	s := len(r[0])
	sel.S = s
	for b := range rows {
		if k[b] < 0 || k[b] > s {
			return sel, fmt.Errorf("mod adapter: k[%d] = %d outside [0, S = %d]", b, k[b], s)
		}
		row, err := mod.SelectTopK(to32(r[b][:validLen(valid, b, s)]), k[b])
		if err != nil {
			return sel, fmt.Errorf("row %d: %w", b, err)
		}
		sel.Rows[b] = row
	}
	return sel, nil
}

// modSelectCausal is mod's causal routing decision row by row (see Mod).
func modSelectCausal(q [][]float64, valid []int) (ref.Selection, error) {
	rows := len(q)
	if rows == 0 {
		return ref.Selection{}, nil
	}
	s := len(q[0])
	sel := ref.Selection{S: s, Rows: make([][]int, rows)}
	for b := range rows {
		row, err := mod.SelectCausal(to32(q[b][:validLen(valid, b, s)]))
		if err != nil {
			return sel, fmt.Errorf("row %d: %w", b, err)
		}
		sel.Rows[b] = row
	}
	return sel, nil
}

// to32 rounds float64 values to float32.
func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// widen returns float32 values as float64 (exact).
func widen(v []float32) []float64 {
	if v == nil {
		return nil
	}
	return f64(v)
}

// unflat splits B·S values into B rows of S, widened.
func unflat(v []float32, rows, s int) [][]float64 {
	if v == nil {
		return nil
	}
	out := make([][]float64, rows)
	for b := range out {
		out[b] = f64(v[b*s : (b+1)*s])
	}
	return out
}

// splitRows splits a (B·S)×c tensor into B matrices S×c, widened.
func splitRows(t *autograd.Tensor, rows, s int) []*mat.Dense {
	out := make([]*mat.Dense, rows)
	c := t.Cols
	for b := range out {
		out[b] = mat.NewDense(s, c, f64(t.Data[b*s*c:(b+1)*s*c]))
	}
	return out
}

// modLayerResult converts mod's layer result (B rows of S) to ref's type.
func modLayerResult(res *mod.LayerResult, rows, s int, withOut bool) *ref.LayerResult {
	sel := ref.Selection{S: s, Rows: make([][]int, rows)}
	topK := ref.Selection{S: s, Rows: make([][]int, rows)}
	for b := range rows {
		sel.Rows[b] = append([]int{}, res.Selected[b]...)
		topK.Rows[b] = append([]int{}, res.TopK[b]...)
	}
	out := &ref.LayerResult{
		RouterWeights:     unflat(res.RouterLogits, rows, s),
		Capacity:          append([]int{}, res.Capacity...),
		Selection:         sel,
		Weights:           unflat(res.Weights, rows, s),
		Multipliers:       unflat(res.Multipliers, rows, s),
		Targets:           unflat(res.Targets, rows, s),
		PredictorLogits:   unflat(res.PredictorLogits, rows, s),
		PredictorAccuracy: res.PredictorAccuracy,
		RouterBCE:         res.RouterBCE,
		PredictorBCE:      res.PredictorBCE,
		LoadBalance:       res.LoadBalance,
		AuxLoss:           res.Aux,
		Routed:            res.Routed,
		Skipped:           res.Skipped,
		Frozen:            ref.Frozen{Selection: sel, TopK: topK, STEOffset: unflat(res.Frozen.STEOffset, rows, s)},
	}
	if pi := res.Frozen.PredictorInput; pi != nil {
		d := len(pi) / (rows * s)
		out.Frozen.PredictorInput = splitRows(autograd.New(rows*s, d, pi), rows, s)
	}
	if withOut {
		out.Out = splitRows(res.Out, rows, s)
	}
	return out
}

// modLayer is a mod layer with ref's parameters p (see Mod).
func modLayer(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) (*ref.LayerResult, error) {
	l, err := modcase.LayerFromRef(cfg, p)
	if err != nil {
		return nil, err
	}
	rows := len(in.X)
	if rows == 0 {
		return nil, fmt.Errorf("mod adapter: no rows")
	}
	s, _ := in.X[0].Dims()
	var tp autograd.Tape
	res, err := l.Forward(&tp, modcase.LayerInputsFromRef(in))
	if err != nil {
		return nil, err
	}
	return modLayerResult(res, rows, s, true), nil
}

// modLayerFrozen is mod's frozen-decision layer with ref's parameters p
// (see Mod).
func modLayerFrozen(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, fz ref.Frozen) (*ref.LayerResult, error) {
	l, err := modcase.LayerFromRef(cfg, p)
	if err != nil {
		return nil, err
	}
	rows := len(in.X)
	if rows == 0 {
		return nil, fmt.Errorf("mod adapter: no rows")
	}
	s, _ := in.X[0].Dims()
	var tp autograd.Tape
	res, err := l.ForwardFrozen(&tp, modcase.LayerInputsFromRef(in), modcase.FrozenFromRef(fz))
	if err != nil {
		return nil, err
	}
	return modLayerResult(res, rows, s, true), nil
}

// modModel is mod's full forward with ref's parameters (see Mod).
func modModel(c spec.ModelConfig, p *ref.ModelParams, in ref.ModelInputs) (*ref.ModelResult, error) {
	m, err := modcase.ModelFromRef(c, p)
	if err != nil {
		return nil, err
	}
	var tp autograd.Tape
	res, err := m.Forward(&tp, modcase.ModelInputsFromRef(in))
	if err != nil {
		return nil, err
	}
	rows, s := len(in.Tokens), len(in.Tokens[0])
	out := &ref.ModelResult{Logits: splitRows(res.Logits, rows, s), Layers: make([]*ref.LayerResult, len(res.Layers)),
		CE: res.CE, Aux: res.Aux, Loss: res.CE + res.Aux}
	for l, lr := range res.Layers {
		if lr != nil {
			out.Layers[l] = modLayerResult(lr, rows, s, false)
		}
	}
	return out, nil
}

// modStepper is mod's decoder as a Stepper.
type modStepper struct{ d *mod.Decoder }

func (st modStepper) Step(token int) (*ref.StepResult, error) {
	r, err := st.d.Step(token)
	if err != nil {
		return nil, err
	}
	return &ref.StepResult{Pos: r.Pos, Logits: widen(r.Logits), Routed: r.Routed,
		RouterWeights: widen(r.RouterLogits), PredictorLogits: widen(r.PredictorLogits)}, nil
}

func modNewDecoder(c spec.ModelConfig, p *ref.ModelParams) (Stepper, error) {
	m, err := modcase.ModelFromRef(c, p)
	if err != nil {
		return nil, err
	}
	d, err := mod.NewDecoder(m)
	if err != nil {
		return nil, err
	}
	return modStepper{d}, nil
}

// round32 rounds values to float32 in place, saturating at ±float32 max
// so that a finite draw (N(0,1) times float32-max/4 can exceed float32's
// range) stays finite; NaN and ±Inf stay.
func round32(v []float64) {
	for i, x := range v {
		if !math.IsInf(x, 0) {
			x = math.Max(-maxF32, math.Min(maxF32, x))
		}
		v[i] = float64(float32(x))
	}
}

// roundInputs rounds layer inputs to float32 in place.
func roundInputs(in ref.LayerInputs) {
	for _, x := range in.X {
		r, c := x.Dims()
		for i := range r {
			round32(x.RawRowView(i)[:c])
		}
	}
	for _, f := range [][][]float64{in.Noise, in.Jitter} {
		for _, row := range f {
			round32(row)
		}
	}
}

// roundParams rounds parameters (ref.LayerParams.Tensors or
// ref.ModelParams.Tensors, which alias them) to float32 in place.
func roundParams(ts []ref.Tensor) {
	for _, t := range ts {
		round32(t.Data)
	}
}

// l2NormOverflow says what goes wrong when an l2norm router computes
// r = sqrt(Σ x_j²) in float32 without scaling the row first.
const l2NormOverflow = "mod's l2norm router overflows: r = sqrt(Σ x_j²) in float32 is +Inf once ‖x‖₂ > sqrt(float32 max) ≈ 1.8e19 " +
	"(x_j² or the sum overflows) although ‖x‖₂ itself is a float32 value up to 3.4e38, and ref's float64 r is finite. " +
	"With r = +Inf, raw weighting gives g = +Inf: under dense compute the straight-through weight g + sg(m·g − g) is NaN " +
	"(0·Inf − Inf), so skipped tokens come out NaN instead of x; the selection becomes a tie at +Inf won by the lowest positions"

// l2NormOverflowLimit is sqrt(float32 max): above it, sqrt(Σ x_j²) in
// float32 overflows.
var l2NormOverflowLimit = math.Sqrt(maxF32)

// knownModL2NormOverflow reports whether a layer case needs an l2norm
// router to scale before squaring in float32: the l2norm router and a valid
// token whose input has ‖x‖₂ (in float64) above sqrt(float32 max). The
// generators cannot produce it for mod (scalePalette32 keeps ‖x‖₂ below
// 1.7e19); TestModL2NormRouterHugeInputs checks mod on such a case.
func knownModL2NormOverflow(impl Impl, cfg spec.Config, in ref.LayerInputs) bool {
	if !impl.Float32 || cfg.Router != spec.RouterL2Norm {
		return false
	}
	for b, x := range in.X {
		s, _ := x.Dims()
		for i := range validLen(in.Valid, b, s) {
			ss := 0.0
			for _, v := range x.RawRowView(i) {
				ss += v * v
			}
			if math.Sqrt(ss) > l2NormOverflowLimit {
				return true
			}
		}
	}
	return false
}

// TestModL2NormRouterHugeInputs checks that mod's l2norm router gives finite
// weights, the float32 rounding of ref's, and leaves skipped tokens
// unchanged, for inputs whose squares overflow float32: one row of four
// tokens, x_j = ±1.5e19·(1 + i/4) (‖x‖₂ from 3e19 to 5.3e19, float32
// values; x_j² ≥ 2.25e38), raw weighting, dense compute.
func TestModL2NormRouterHugeInputs(t *testing.T) {
	cfg := spec.Config{Block: spec.DefaultBlockConfig(4, 1, 4), Router: spec.RouterL2Norm, Weighting: spec.WeightRaw,
		Capacity: spec.Capacity{Kind: spec.CapacityRatio, Ratio: 0.5}, Compute: spec.ComputeDense, Aux: spec.AuxNone, Causal: spec.CausalOff}
	p := ref.NewLayerParams(cfg, ref.NewRand(3))
	roundParams(p.Tensors(""))
	x := mat.NewDense(4, 4, nil)
	for i := range 4 {
		for j := range 4 {
			x.Set(i, j, float64(float32(1.5e19*(1+0.25*float64(i))*float64(1-2*((i+j)%2)))))
		}
	}
	in := ref.LayerInputs{X: []*mat.Dense{x}}
	if !knownModL2NormOverflow(Mod, cfg, in) {
		t.Fatal("knownModL2NormOverflow does not recognise the reproduction")
	}
	want, err := Ref.Layer(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Mod.Layer(cfg, p, in)
	if err != nil {
		t.Fatal(err)
	}
	broken := false
	for i := range 4 {
		sel := isSelected(got.Selection, 0, i)
		r, rRef := got.RouterWeights[0][i], want.RouterWeights[0][i]
		j := rowDiff(got.Out[0], x, i)
		t.Logf("token %d: ref r = %.4g, mod r = %v (float32 of ref's: %v); selected %v; output column 0 %v, input %v",
			i, rRef, r, float32(rRef), sel, got.Out[0].At(i, 0), x.At(i, 0))
		if math.IsInf(r, 1) && !math.IsInf(float64(float32(rRef)), 0) {
			broken = true
		}
		if !sel && j >= 0 {
			broken = true
		}
	}
	if broken {
		t.Fatal(l2NormOverflow)
	}
}
