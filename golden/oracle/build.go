package oracle

import (
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/mat"

	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// Builder accumulates a case's arrays and their manifest entries.
type Builder struct {
	m      *format.Manifest
	arrays map[string]*format.Array
}

func NewBuilder(m *format.Manifest) *Builder {
	return &Builder{m: m, arrays: make(map[string]*format.Array)}
}

func (b *Builder) Add(name, role string, a *format.Array, tol *format.Tolerance) {
	if _, dup := b.arrays[name]; dup {
		panic("golden: array " + name + " added twice")
	}
	b.arrays[name] = a
	b.m.Arrays = append(b.m.Arrays, format.ArrayInfo{Name: name, Role: role, DType: a.DType, Shape: a.Shape, Tolerance: tol})
}

// Expect adds an expected array with the tolerance its kind calls for.
func (b *Builder) Expect(name string, a *format.Array) {
	b.Add(name, format.RoleExpected, a, ToleranceFor(name, a))
}

func (b *Builder) Build() *format.Case {
	sort.SliceStable(b.m.Arrays, func(i, j int) bool { return roleOrder(b.m.Arrays[i].Role) < roleOrder(b.m.Arrays[j].Role) })
	return &format.Case{Manifest: b.m, Arrays: b.arrays}
}

func roleOrder(role string) int {
	switch role {
	case format.RoleInput:
		return 0
	case format.RoleParam:
		return 1
	case format.RoleUpstream:
		return 2
	}
	return 3
}

// BatchArray flattens B matrices of S×c into a B×S×c array. When they
// are consecutive views of one slice (ref.NewBatch: a layer's output and
// its input gradient), the array is that slice, not a copy: writing to
// either changes both.
func BatchArray(ms []*mat.Dense) *format.Array {
	r, c := ms[0].Dims()
	if v, ok := batchData(ms); ok {
		return format.Float(v, len(ms), r, c)
	}
	v := make([]float64, 0, len(ms)*r*c)
	for _, m := range ms {
		for i := 0; i < r; i++ {
			v = append(v, m.RawRowView(i)...)
		}
	}
	return format.Float(v, len(ms), r, c)
}

// batchData returns the B×S×c slice that ms are consecutive views of,
// and false if they are not.
func batchData(ms []*mat.Dense) ([]float64, bool) {
	r, c := ms[0].Dims()
	n := r * c
	first := ms[0].RawMatrix().Data
	if n == 0 || cap(first) < len(ms)*n {
		return nil, false
	}
	all := first[:len(ms)*n]
	for b, m := range ms {
		raw := m.RawMatrix()
		if raw.Rows != r || raw.Cols != c || raw.Stride != c || &raw.Data[0] != &all[b*n] {
			return nil, false
		}
	}
	return all, true
}

// FieldArray flattens a B×S per-token field, writing 0 at padded positions
// (which are judged nowhere).
func FieldArray(f [][]float64, valid []int) *format.Array {
	s := len(f[0])
	v := make([]float64, 0, len(f)*s)
	for b, row := range f {
		for i, x := range row {
			if i >= ValidLen(valid, b, s) || math.IsNaN(x) {
				x = 0
			}
			v = append(v, x)
		}
	}
	return format.Float(v, len(f), s)
}

func ValidLen(valid []int, b, s int) int {
	if valid == nil {
		return s
	}
	return valid[b]
}

// SelectedArray is B×k_max ascending positions, padded with −1.
func SelectedArray(sel ref.Selection) *format.Array {
	kmax := 1
	for _, row := range sel.Rows {
		kmax = max(kmax, len(row))
	}
	v := make([]int64, 0, len(sel.Rows)*kmax)
	for _, row := range sel.Rows {
		for j := 0; j < kmax; j++ {
			p := int64(-1)
			if j < len(row) {
				p = int64(row[j])
			}
			v = append(v, p)
		}
	}
	return format.Int(v, len(sel.Rows), kmax)
}

// IntsArray returns a 1-D int64 array.
func IntsArray(v []int) *format.Array {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return format.Int(out, len(v))
}

// IntGrid returns a B×S int64 array.
func IntGrid(v [][]int) *format.Array {
	out := make([]int64, 0, len(v)*len(v[0]))
	for _, row := range v {
		for _, x := range row {
			out = append(out, int64(x))
		}
	}
	return format.Int(out, len(v), len(v[0]))
}

// TensorArray returns a parameter as an array of its own shape.
func TensorArray(t ref.Tensor) *format.Array {
	return format.Float(append([]float64(nil), t.Data...), t.Shape...)
}

// Gradient is the frozen-routing finite-difference gradient of loss with
// respect to data, shaped like it.
func Gradient(loss func() (float64, error), data []float64, shape []int) (*format.Array, error) {
	g, err := ref.FDGradient(loss, data, ref.FDStep)
	if err != nil {
		return nil, err
	}
	return format.Float(g, shape...), nil
}

// ExpectGradients adds to b the analytic gradients of a layer case:
// grad.input.x from dx (one S×d matrix per batch row) and grad.param.NAME
// from grads, which lists the gradients in the order of the parameters
// params.
func ExpectGradients(b *Builder, dx []*mat.Dense, params, grads []ref.Tensor) {
	b.Expect("grad.input.x", BatchArray(dx))
	for k, t := range grads {
		b.Expect("grad.param."+params[k].Name, format.Float(t.Data, t.Shape...))
	}
}

// GapsOf converts ref.BoundaryGaps to the manifest's form: −1 where a row
// has no boundary.
func GapsOf(g []float64) []float64 {
	out := make([]float64, len(g))
	for i, v := range g {
		if math.IsInf(v, 1) {
			v = -1
		}
		out[i] = v
	}
	return out
}

// MinGap returns the smallest real gap, +Inf if none.
func MinGap(g []float64) float64 {
	m := math.Inf(1)
	for _, v := range g {
		if v >= 0 {
			m = math.Min(m, v)
		}
	}
	return m
}

// CausalGaps returns, per row, the smallest |score| over valid tokens: how
// far the causal routing rule score > 0 is from flipping.
func CausalGaps(score [][]float64, valid []int) []float64 {
	out := make([]float64, len(score))
	for b, row := range score {
		out[b] = math.Inf(1)
		for i := 0; i < ValidLen(valid, b, len(row)); i++ {
			out[b] = math.Min(out[b], math.Abs(row[i]))
		}
	}
	return GapsOf(out)
}

func Errorf(name string, err error) error { return fmt.Errorf("generating %s: %w", name, err) }

// GeneratorVersion changes whenever the generator would write different
// cases from the same code of ref.
const GeneratorVersion = 6

// WrittenOut returns c with the predictor width written out (d/2 unless
// set), as a manifest holds it, so that a reader need not know the default.
func WrittenOut(c spec.Config) spec.Config {
	c.PredictorHidden = c.PredictorWidth()
	return c
}
