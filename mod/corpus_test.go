package mod

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden"
)

// corpusDir is the golden corpus, relative to this package.
const corpusDir = "../golden/corpus"

// TestCorpus runs mod on every case of the golden corpus and judges every
// expected and gradient array with the tolerance its manifest gives, at
// valid positions for arrays whose leading dimensions are B×S, integer
// arrays (selections, routing decisions) exactly. With -v it prints the
// largest error found as a fraction of the manifest's bound (atol +
// rtol·|expected|), for forward values and gradients, and, marked
// "(scaled)", the largest |got − expected| / max(‖expected‖∞, 1).
func TestCorpus(t *testing.T) {
	names, err := golden.List(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, err := golden.Load(corpusDir, name)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string][]float64
			switch c.Manifest.Kind {
			case golden.KindLayer:
				got = runLayerCase(t, c)
			default:
				got = runModelCase(t, c)
			}
			judgeCase(t, c, got)
		})
	}
}

// runLayerCase returns every array a layer case judges, computed by mod.
func runLayerCase(t *testing.T, c *golden.Case) map[string][]float64 {
	l, in, err := LayerFromCase(c)
	if err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	res, err := l.Forward(&tp, in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{
		"expected.out":                widen(res.Out.Data),
		"expected.router_logits":      widen(res.RouterLogits),
		"expected.selected":           selectedGrid(res.Selected),
		"expected.weights":            widen(res.Weights),
		"expected.multipliers":        widen(res.Multipliers),
		"expected.targets":            widen(res.Targets),
		"expected.predictor_logits":   widen(res.PredictorLogits),
		"expected.predictor_accuracy": {res.PredictorAccuracy},
		"expected.aux.router_bce":     {res.RouterBCE},
		"expected.aux.predictor_bce":  {res.PredictorBCE},
		"expected.aux.load_balance":   {res.LoadBalance},
		"expected.aux.total":          {res.Aux},
	}
	u := c.Arrays["upstream.out"]
	loss := tp.SumAll(tp.Mul(res.Out, autograd.New(res.Out.Rows, res.Out.Cols, to32(u.F))))
	if res.AuxLoss != nil {
		loss = tp.Add(loss, res.AuxLoss)
	}
	got["expected.loss"] = []float64{float64(loss.Data[0])}
	tp.Backward(loss)
	got["grad.input.x"] = widen(in.X.Grad)
	for _, p := range l.Params("") {
		got["grad.param."+p.Name] = widen(p.T.Grad)
	}
	return got
}

// runModelCase returns every array a model or decode case judges,
// computed by mod.
func runModelCase(t *testing.T, c *golden.Case) map[string][]float64 {
	m, in, err := ModelFromCase(c)
	if err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	res, err := m.Forward(&tp, in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{
		"expected.logits": widen(res.Logits.Data),
		"expected.ce":     {res.CE},
		"expected.loss":   {float64(res.Loss.Data[0])},
	}
	for l, lr := range res.Layers {
		if lr == nil {
			continue
		}
		pre := fmt.Sprintf("expected.L%d.", l)
		got[pre+"router_logits"] = widen(lr.RouterLogits)
		got[pre+"selected"] = selectedGrid(lr.Selected)
		got[pre+"predictor_logits"] = widen(lr.PredictorLogits)
		got[pre+"aux.total"] = []float64{lr.Aux}
	}
	if c.Manifest.Kind == golden.KindDecode {
		decodeCase(t, c, m, in, got)
		return got
	}
	tp.Backward(res.Loss)
	for _, p := range m.Params() {
		got["grad.param."+p.Name] = widen(p.T.Grad)
	}
	return got
}

// decodeCase decodes every sequence token by token and adds the decoded
// logits and per-layer routing decisions to got.
func decodeCase(t *testing.T, c *golden.Case, m *Model, in ModelInputs, got map[string][]float64) {
	rows, s, vocab := c.Manifest.Config.Batch, c.Manifest.Config.SeqLen, m.Config().Vocab
	logits := make([]float64, rows*s*vocab)
	routed := make([][]float64, len(m.Layers))
	for l := range routed {
		routed[l] = make([]float64, rows*s)
	}
	for b := range rows {
		dec, err := NewDecoder(m)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in.Valid[b] {
			st, err := dec.Step(in.Tokens[b][i])
			if err != nil {
				t.Fatal(err)
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
}

// judgeCase compares every expected array of the case with got.
func judgeCase(t *testing.T, c *golden.Case, got map[string][]float64) {
	cfg := c.Manifest.Config
	valid := c.Arrays["input.valid"].I
	for _, info := range c.Manifest.Arrays {
		if info.Role != golden.RoleExpected {
			continue
		}
		g, ok := got[info.Name]
		if !ok || g == nil {
			t.Errorf("%s: mod does not compute it", info.Name)
			continue
		}
		want := c.Arrays[info.Name]
		if len(g) != want.Len() {
			t.Errorf("%s: mod has %d values, want %d (shape %v)", info.Name, len(g), want.Len(), want.Shape)
			continue
		}
		// Arrays whose leading dimensions are B×S are judged at valid
		// positions only.
		inner := 0
		if len(want.Shape) >= 2 && want.Shape[0] == cfg.Batch && want.Shape[1] == cfg.SeqLen {
			inner = want.Len() / (cfg.Batch * cfg.SeqLen)
		}
		kind := "corpus forward"
		if strings.HasPrefix(info.Name, "grad.") {
			kind = "corpus gradient"
		}
		scale := 1.0
		for k := range g {
			if inner == 0 || (k/inner)%cfg.SeqLen < int(valid[(k/inner)/cfg.SeqLen]) {
				if !want.IsInt() {
					scale = math.Max(scale, math.Abs(want.F[k]))
				}
			}
		}
		bad, worst, worstScaled := 0, 0.0, 0.0
		for k := range g {
			if inner > 0 && (k/inner)%cfg.SeqLen >= int(valid[(k/inner)/cfg.SeqLen]) {
				continue
			}
			var e float64
			if want.IsInt() {
				e = float64(want.I[k])
			} else {
				e = want.F[k]
			}
			diff := math.Abs(g[k] - e)
			bound := info.Tolerance.ATol + info.Tolerance.RTol*math.Abs(e)
			ratio := 0.0
			if diff > 0 {
				ratio = diff / bound // +Inf for an exact array
			}
			worst = math.Max(worst, ratio)
			worstScaled = math.Max(worstScaled, diff/scale)
			if !(ratio <= 1) {
				if bad < 4 {
					t.Errorf("%s%v = %.9g, want %.9g: difference %.3g exceeds %.3g", info.Name, want.Index(k), g[k], e, diff, bound)
				}
				bad++
			}
		}
		if bad > 4 {
			t.Errorf("%s: %d of %d values out of tolerance", info.Name, bad, len(g))
		}
		measured.Lock()
		for _, key := range []string{kind, kind + ": " + arrayKind(info.Name)} {
			measured.max[key] = math.Max(measured.max[key], worst)
			measured.max[key+" (scaled)"] = math.Max(measured.max[key+" (scaled)"], worstScaled)
		}
		measured.Unlock()
	}
}

// arrayKind names an array without its layer prefix: "router_logits" for
// "expected.L2.router_logits", "Wq" for "grad.param.L1.Wq".
func arrayKind(name string) string {
	name = strings.TrimPrefix(strings.TrimPrefix(name, "expected."), "grad.param.")
	if len(name) > 1 && name[0] == 'L' && strings.Contains(name, ".") {
		name = name[strings.Index(name, ".")+1:]
	}
	return name
}

// selectedGrid is a selection as the corpus stores it: B×k_max ascending
// positions, −1 where a row has fewer.
func selectedGrid(sel [][]int) []float64 {
	kmax := 1
	for _, p := range sel {
		kmax = max(kmax, len(p))
	}
	out := make([]float64, 0, len(sel)*kmax)
	for _, p := range sel {
		for j := range kmax {
			v := -1.0
			if j < len(p) {
				v = float64(p[j])
			}
			out = append(out, v)
		}
	}
	return out
}

func widen(v []float32) []float64 {
	if v == nil {
		return nil
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
