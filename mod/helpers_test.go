package mod_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/modref/modref/mod"
	"github.com/modref/modref/mod/modcase"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// measure makes TestMain print the measured errors: go test ./mod -measure -v
// (-v because go test shows a passing package's output only then).
var measure = flag.Bool("measure", false, "print the largest error measured per kind of comparison after the tests")

// TestMain runs the tests and, with -measure, prints the largest error measured
// per kind of comparison: for comparisons with ref (layer, model, decode),
// |got − want| / max(‖want‖∞, 1); for the golden corpus, |got − want| over
// the manifest's bound atol + rtol·|want|, and that scaled difference too
// where marked "(scaled)".
func TestMain(m *testing.M) {
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { userChecks = userChecks || f.Name == "rapid.checks" })
	code := m.Run()
	if *measure {
		kinds := make([]string, 0, len(measured.max))
		for kind := range measured.max {
			kinds = append(kinds, kind)
		}
		sort.Strings(kinds)
		for _, kind := range kinds {
			fmt.Printf("measured: %s: %.3g\n", kind, measured.max[kind])
		}
	}
	os.Exit(code)
}

// userChecks is set when -rapid.checks is given on the command line.
var userChecks bool

// rapidChecks makes rapid draw n cases per property unless -rapid.checks is
// given on the command line, so that the suite stays fast.
func rapidChecks(n int) {
	if !userChecks {
		if err := flag.Set("rapid.checks", fmt.Sprint(n)); err != nil {
			panic(err)
		}
	}
}

// measured records the largest scaled error seen per kind of comparison,
// for the tolerance report that TestMain prints with -measure.
var measured = struct {
	sync.Mutex
	max map[string]float64
}{max: map[string]float64{}}

func record(kind string, ratio float64) {
	measured.Lock()
	defer measured.Unlock()
	measured.max[kind] = math.Max(measured.max[kind], ratio)
}

// reporter is what both *testing.T and *rapid.T offer.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// tol is an allclose bound relative to the scale of the expected array:
// |got − want| <= tol.scale·max(‖want‖∞, 1) + tol.rel·|want|.
type tol struct{ scale, rel float64 }

// compare checks got against want at the elements where keep is nil or
// true, reports the index and size of every difference beyond t (at most a
// few), and records the largest ratio of difference to bound under kind.
// It returns the number of elements out of tolerance.
func compare(tb reporter, kind, what string, got []float32, want []float64, keep func(int) bool, t tol) int {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return 1
	}
	scale := 1.0
	for k, w := range want {
		if keep == nil || keep(k) {
			scale = math.Max(scale, math.Abs(w))
		}
	}
	bad, worst := 0, 0.0
	for k, w := range want {
		if keep != nil && !keep(k) {
			continue
		}
		diff := math.Abs(float64(got[k]) - w)
		bound := t.scale*scale + t.rel*math.Abs(w)
		ratio := diff / bound
		if math.IsNaN(ratio) {
			ratio = math.Inf(1)
		}
		worst = math.Max(worst, diff/scale)
		if ratio > 1 {
			if bad < 4 {
				tb.Errorf("%s[%d] = %.9g, want %.9g: difference %.3g exceeds %.3g (scale %.3g)", what, k, got[k], w, diff, bound, scale)
			}
			bad++
		}
	}
	if bad > 4 {
		tb.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
	record(kind, worst)
	record(kind+": "+strings.TrimLeft(strings.TrimPrefix(what, "grad "), "L0123456789. "), worst)
	return bad
}

// round32 rounds every value to float32, so that ref and mod see the same
// inputs and parameters.
func round32(v []float64) {
	for i, x := range v {
		v[i] = float64(float32(x))
	}
}

// flatBatch stacks B matrices S×c into B·S·c values.
func flatBatch(ms []*mat.Dense) []float64 {
	var v []float64
	for _, m := range ms {
		r, c := m.Dims()
		for i := 0; i < r; i++ {
			v = append(v, m.RawRowView(i)[:c]...)
		}
	}
	return v
}

// flatField stacks a B×S field.
func flatField(f [][]float64) []float64 {
	if f == nil {
		return nil
	}
	var v []float64
	for _, row := range f {
		v = append(v, row...)
	}
	return v
}

// roundParams rounds ref's parameters to float32 in place.
func roundParams(ts []ref.Tensor) {
	for _, t := range ts {
		round32(t.Data)
	}
}

// layerFromRef returns a mod layer holding ref's parameters p.
func layerFromRef(tb reporter, cfg spec.Config, p *ref.LayerParams) *mod.Layer {
	tb.Helper()
	l, err := modcase.LayerFromRef(cfg, p)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// modelFromRef returns a mod model holding ref's parameters p.
func modelFromRef(tb reporter, cfg spec.ModelConfig, p *ref.ModelParams) *mod.Model {
	tb.Helper()
	m, err := modcase.ModelFromRef(cfg, p)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// to32 rounds float64 values to float32.
func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// refSelection returns mod's selection as ref's.
func refSelection(s int, sel [][]int) ref.Selection {
	rows := make([][]int, len(sel))
	for b, p := range sel {
		rows[b] = append([]int{}, p...)
	}
	return ref.Selection{S: s, Rows: rows}
}

// validMask returns keep(k) for flat index k of a B×S×c array: whether its
// position is valid.
func validMask(valid []int, s, c int) func(int) bool {
	return func(k int) bool {
		if valid == nil {
			return true
		}
		p := k / c
		return p%s < valid[p/s]
	}
}

// dot returns Σ a⊙b over a batch of matrices and u.
func dot(a []*mat.Dense, u []float64) float64 {
	var s float64
	for i, v := range flatBatch(a) {
		s += float64(v * u[i])
	}
	return s
}

// decisiveRefForward runs ref's model forward on c and skips the case when a
// routing decision of any layer lies within the near-tie margin, where a
// float32 implementation may legitimately decide the other way.
func decisiveRefForward(t reporter, c modelCase) *ref.ModelResult {
	t.Helper()
	want, err := ref.ModelForward(c.cfg, c.p, c.in)
	if err != nil {
		t.Fatal(err)
	}
	for l, lr := range want.Layers {
		if lr != nil && !decisive(c.cfg.Layers[l].Config, lr, c.in.Valid) {
			t.Skip("skipped because a routing decision is within the near-tie margin, where float32 may flip it")
		}
	}
	return want
}
