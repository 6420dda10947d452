package ref

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/modref/modref/spec"
	"gonum.org/v1/gonum/mat"
)

// BlockParams are the parameters of one pre-norm transformer block (docs/spec.md
// §5). Weights are d_in×d_out (y = x·W).
type BlockParams struct {
	Norm1     []float64  // gamma of N1, length d
	Norm1Bias []float64  // beta of N1 (LayerNorm only; nil for RMSNorm)
	Wq        *mat.Dense // d×d
	Wk        *mat.Dense // d×(kv_heads·d_h): d×d unless grouped-query attention
	Wv        *mat.Dense // d×(kv_heads·d_h)
	Bq        []float64  // b_q, length d (QKVBias only; nil otherwise)
	Bk        []float64  // b_k, length kv_heads·d_h (QKVBias only)
	Bv        []float64  // b_v, length kv_heads·d_h (QKVBias only)
	Wo        *mat.Dense // d×d
	Norm2     []float64  // gamma of N2, length d
	Norm2Bias []float64  // beta of N2 (LayerNorm only; nil for RMSNorm)
	W1        *mat.Dense // d×d_ff
	W2        *mat.Dense // d_ff×d
	W3        *mat.Dense // d×d_ff, the gate's value branch (SwiGLU only; nil for GELU)
}

// LayerParams are the parameters of one layer: its block plus, for a routed
// layer, its router and predictor. Unused fields are nil.
type LayerParams struct {
	Block      BlockParams
	Router     []float64  // w, length d (linear, linear_bias)
	RouterBias []float64  // b, length 1 (linear_bias)
	PredW1     *mat.Dense // predictor d×h
	PredB1     []float64  // predictor bias, length h
	PredW2     *mat.Dense // predictor h×1
	PredB2     []float64  // predictor output bias, length 1
}

// Tensor is a named parameter: its shape and its backing slice (row-major).
// Writing to Data changes the parameter.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float64
}

func denseTensor(name string, m *mat.Dense) Tensor {
	r, c := m.Dims()
	raw := m.RawMatrix()
	if raw.Stride != c {
		panic("ref: parameter matrix is a strided view; parameters must own contiguous storage")
	}
	return Tensor{Name: name, Shape: []int{r, c}, Data: raw.Data[:r*c]}
}

func appendVec(ts []Tensor, name string, v []float64) []Tensor {
	if v == nil {
		return ts
	}
	return append(ts, Tensor{Name: name, Shape: []int{len(v)}, Data: v})
}

func appendMat(ts []Tensor, name string, m *mat.Dense) []Tensor {
	if m == nil {
		return ts
	}
	return append(ts, denseTensor(name, m))
}

// Tensors lists the block's parameters, prefixed by prefix, in a fixed order.
func (p *BlockParams) Tensors(prefix string) []Tensor {
	var ts []Tensor
	ts = appendVec(ts, prefix+"Norm1", p.Norm1)
	ts = appendVec(ts, prefix+"Norm1Bias", p.Norm1Bias)
	ts = appendMat(ts, prefix+"Wq", p.Wq)
	ts = appendMat(ts, prefix+"Wk", p.Wk)
	ts = appendMat(ts, prefix+"Wv", p.Wv)
	ts = appendVec(ts, prefix+"Bq", p.Bq)
	ts = appendVec(ts, prefix+"Bk", p.Bk)
	ts = appendVec(ts, prefix+"Bv", p.Bv)
	ts = appendMat(ts, prefix+"Wo", p.Wo)
	ts = appendVec(ts, prefix+"Norm2", p.Norm2)
	ts = appendVec(ts, prefix+"Norm2Bias", p.Norm2Bias)
	ts = appendMat(ts, prefix+"W1", p.W1)
	ts = appendMat(ts, prefix+"W2", p.W2)
	ts = appendMat(ts, prefix+"W3", p.W3)
	return ts
}

// Tensors lists the layer's parameters, prefixed by prefix, in a fixed order.
func (p *LayerParams) Tensors(prefix string) []Tensor {
	ts := p.Block.Tensors(prefix)
	ts = appendVec(ts, prefix+"Router", p.Router)
	ts = appendVec(ts, prefix+"RouterBias", p.RouterBias)
	ts = appendMat(ts, prefix+"PredW1", p.PredW1)
	ts = appendVec(ts, prefix+"PredB1", p.PredB1)
	ts = appendMat(ts, prefix+"PredW2", p.PredW2)
	ts = appendVec(ts, prefix+"PredB2", p.PredB2)
	return ts
}

// NewRand returns the package's deterministic generator: math/rand/v2 with a
// PCG source seeded by (seed, seed^0x9e3779b97f4a7c15).
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// RandomMatrix returns an r×c matrix of N(0, std^2) draws from rng; a nil
// rng gives the matrix of zeros.
func RandomMatrix(rng *rand.Rand, r, c int, std float64) *mat.Dense {
	data := make([]float64, r*c)
	if rng != nil {
		for k := range data { // row by row, as m.Set(i, j, ·) would fill it
			data[k] = std * normal(rng)
		}
	}
	return mat.NewDense(r, c, data)
}

// RandomVector returns n draws of mean + std*N(0,1) from rng; a nil rng
// gives n values of mean.
func RandomVector(rng *rand.Rand, n int, mean, std float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		if rng == nil {
			v[i] = mean
			continue
		}
		v[i] = mean + float64(std*normal(rng))
	}
	return v
}

// RandomField returns a rows×cols per-token field of N(0,1) draws, the form
// of the random router's noise and of the jitter eps (docs/spec.md §2).
func RandomField(rng *rand.Rand, rows, cols int) [][]float64 {
	f := make([][]float64, rows)
	for b := range f {
		f[b] = RandomVector(rng, cols, 0, 1)
	}
	return f
}

// source is where new parameters' values come from: draws from rng (a
// nil rng: each distribution's mean), or, when view is set, the storage
// view returns for the parameter Tensors names name, used as it is.
type source struct {
	rng  *rand.Rand
	view func(name string, n int) ([]float64, error)
	err  error // view's first error
}

// matrix is an r×c weight matrix named name, drawn N(0, std^2).
func (src *source) matrix(name string, r, c int, std float64) *mat.Dense {
	if src.view == nil {
		return RandomMatrix(src.rng, r, c, std)
	}
	return mat.NewDense(r, c, src.viewed(name, r*c))
}

// vector is a parameter vector named name of n draws of mean + std*N(0,1).
func (src *source) vector(name string, n int, mean, std float64) []float64 {
	if src.view == nil {
		return RandomVector(src.rng, n, mean, std)
	}
	return src.viewed(name, n)
}

// viewed is view's storage for name, n values; after an error, zeros in
// its place (and view is not asked again).
func (src *source) viewed(name string, n int) []float64 {
	if src.err == nil {
		v, err := src.view(name, n)
		if err == nil && len(v) != n {
			err = fmt.Errorf("params: %s has %d values, want %d", name, len(v), n)
		}
		if err == nil {
			return v[:n:n]
		}
		src.err = err
	}
	return make([]float64, n)
}

// drawNormsAndAttention draws the first half of a block's parameters into
// p, in the order of Tensors: N1's gain (and bias), Wq, Wk, Wv (and the
// biases of q, k, v), Wo and N2's gain (and bias), as NewBlockParams
// describes.
func drawNormsAndAttention(c spec.BlockConfig, src *source, p *BlockParams) {
	d := c.D
	sd := 1 / math.Sqrt(float64(d))
	ln := c.Norm == spec.NormLayer
	p.Norm1 = src.vector("Norm1", d, 1, 0.1)
	if ln {
		p.Norm1Bias = src.vector("Norm1Bias", d, 0, 0.1)
	}
	p.Wq = src.matrix("Wq", d, d, sd)
	p.Wk = src.matrix("Wk", d, c.KVWidth(), sd)
	p.Wv = src.matrix("Wv", d, c.KVWidth(), sd)
	if c.QKVBias {
		p.Bq = src.vector("Bq", d, 0, 0.1)
		p.Bk = src.vector("Bk", c.KVWidth(), 0, 0.1)
		p.Bv = src.vector("Bv", c.KVWidth(), 0, 0.1)
	}
	p.Wo = src.matrix("Wo", d, d, sd)
	p.Norm2 = src.vector("Norm2", d, 1, 0.1)
	if ln {
		p.Norm2Bias = src.vector("Norm2Bias", d, 0, 0.1)
	}
}

// NewBlockParams draws a block's parameters: each weight matrix N(0, 1/d_in),
// norm gains 1 + N(0, 0.1^2) and LayerNorm's and the q, k, v biases
// N(0, 0.1^2), so that tests
// see gains and biases away from their trivial values.
func NewBlockParams(c spec.BlockConfig, rng *rand.Rand) BlockParams {
	return newBlockParams(c, &source{rng: rng})
}

// newBlockParams is NewBlockParams with its values from src.
func newBlockParams(c spec.BlockConfig, src *source) BlockParams {
	d, f := c.D, c.DFF
	sd, sf := 1/math.Sqrt(float64(d)), 1/math.Sqrt(float64(f))
	var p BlockParams
	// Drawn in the order of Tensors.
	drawNormsAndAttention(c, src, &p)
	p.W1 = src.matrix("W1", d, f, sd)
	p.W2 = src.matrix("W2", f, d, sf)
	if c.MLP == spec.ActSwiGLU {
		p.W3 = src.matrix("W3", d, f, sd)
	}
	return p
}

// NewLayerParams draws a routed layer's parameters: the block as in
// NewBlockParams, router w ~ N(0, 1/d), router bias ~ N(0, 0.1^2), and the
// predictor's weights N(0, 1/d_in) with biases N(0, 0.1^2). A nil rng
// draws nothing: each parameter is its distribution's mean (gains 1, the
// rest 0), the shapes to load a case's values into.
func NewLayerParams(c spec.Config, rng *rand.Rand) *LayerParams {
	return newLayerParams(c, &source{rng: rng})
}

// LayerParamsOver returns a routed layer's parameters whose storage is
// view's: view(name, n) returns the n values, row-major, of the parameter
// Tensors("") names name, which the parameters then use without a copy
// (writing to either changes both). It returns view's first error, or an
// error if a slice is not n long.
func LayerParamsOver(c spec.Config, view func(name string, n int) ([]float64, error)) (*LayerParams, error) {
	src := &source{view: view}
	p := newLayerParams(c, src)
	if src.err != nil {
		return nil, src.err
	}
	return p, nil
}

// newLayerParams is NewLayerParams with its values from src.
func newLayerParams(c spec.Config, src *source) *LayerParams {
	d := c.Block.D
	p := &LayerParams{Block: newBlockParams(c.Block, src)}
	if c.Router == spec.RouterLinear || c.Router == spec.RouterLinearBias {
		p.Router = src.vector("Router", d, 0, 1/math.Sqrt(float64(d)))
	}
	if c.Router == spec.RouterLinearBias {
		p.RouterBias = src.vector("RouterBias", 1, 0, 0.1)
	}
	if c.HasPredictor() {
		h := c.PredictorWidth()
		p.PredW1 = src.matrix("PredW1", d, h, 1/math.Sqrt(float64(d)))
		p.PredB1 = src.vector("PredB1", h, 0, 0.1)
		p.PredW2 = src.matrix("PredW2", h, 1, 1/math.Sqrt(float64(h)))
		p.PredB2 = src.vector("PredB2", 1, 0, 0.1)
	}
	return p
}

func checkVec(name string, v []float64, n int, needed bool) error {
	if !needed {
		if v != nil {
			return fmt.Errorf("params: %s is set (length %d) but the configuration does not use it; leave it nil", name, len(v))
		}
		return nil
	}
	if len(v) != n {
		return fmt.Errorf("params: %s has length %d, want %d", name, len(v), n)
	}
	return nil
}

func checkMat(name string, m *mat.Dense, r, c int, needed bool) error {
	if !needed {
		if m != nil {
			return fmt.Errorf("params: %s is set but the configuration does not use it; leave it nil", name)
		}
		return nil
	}
	if m == nil {
		return fmt.Errorf("params: %s is nil, want a %d×%d matrix", name, r, c)
	}
	if mr, mc := m.Dims(); mr != r || mc != c {
		return fmt.Errorf("params: %s is %d×%d, want %d×%d", name, mr, mc, r, c)
	}
	return nil
}

// Check reports the first block parameter whose presence or shape does not
// match the configuration.
func (p *BlockParams) Check(c spec.BlockConfig) error {
	d, f := c.D, c.DFF
	ln := c.Norm == spec.NormLayer
	for _, e := range []error{
		checkVec("Norm1", p.Norm1, d, true),
		checkVec("Norm1Bias", p.Norm1Bias, d, ln),
		checkMat("Wq", p.Wq, d, d, true),
		checkMat("Wk", p.Wk, d, c.KVWidth(), true),
		checkMat("Wv", p.Wv, d, c.KVWidth(), true),
		checkVec("Bq", p.Bq, d, c.QKVBias),
		checkVec("Bk", p.Bk, c.KVWidth(), c.QKVBias),
		checkVec("Bv", p.Bv, c.KVWidth(), c.QKVBias),
		checkMat("Wo", p.Wo, d, d, true),
		checkVec("Norm2", p.Norm2, d, true),
		checkVec("Norm2Bias", p.Norm2Bias, d, ln),
		checkMat("W1", p.W1, d, f, true),
		checkMat("W2", p.W2, f, d, true),
		checkMat("W3", p.W3, d, f, c.MLP == spec.ActSwiGLU),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// Check reports the first layer parameter whose presence or shape does not
// match the configuration.
func (p *LayerParams) Check(c spec.Config) error {
	if err := p.Block.Check(c.Block); err != nil {
		return err
	}
	d, h := c.Block.D, c.PredictorWidth()
	pred := c.HasPredictor()
	for _, e := range []error{
		checkVec("Router", p.Router, d, c.Router == spec.RouterLinear || c.Router == spec.RouterLinearBias),
		checkVec("RouterBias", p.RouterBias, 1, c.Router == spec.RouterLinearBias),
		checkMat("PredW1", p.PredW1, d, h, pred),
		checkVec("PredB1", p.PredB1, h, pred),
		checkMat("PredW2", p.PredW2, h, 1, pred),
		checkVec("PredB2", p.PredB2, 1, pred),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// checkDense checks the parameters of a dense layer: a block and no router
// or predictor.
func (p *LayerParams) checkDense(c spec.BlockConfig) error {
	if err := p.Block.Check(c); err != nil {
		return err
	}
	if p.Router != nil || p.RouterBias != nil || p.PredW1 != nil || p.PredB1 != nil || p.PredW2 != nil || p.PredB2 != nil {
		return fmt.Errorf("params: a dense layer has router or predictor parameters; leave them nil")
	}
	return nil
}
