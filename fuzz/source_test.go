package fuzz

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// Source is where a property draws its configuration and data from: rapid
// (rapidSource, with shrinking, for `go test`) or the raw bytes of a native
// fuzz input (byteSource). A property written against Source is both a rapid
// property and a fuzz target, and the fuzz decoding never runs out of input:
// an exhausted byteSource reads zeros, which decode to the smallest choice.
type Source interface {
	// Int returns an integer in [lo, hi].
	Int(lo, hi int, label string) int
	// Pick returns one of vs.
	Pick(vs []float64, label string) float64
	// Uint64 returns 64 arbitrary bits (seeds of ref.NewRand).
	Uint64(label string) uint64
}

// failer is what a property needs from *testing.T and *rapid.T.
type failer interface {
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

type rapidSource struct{ t *rapid.T }

func (s rapidSource) Int(lo, hi int, label string) int {
	return rapid.IntRange(lo, hi).Draw(s.t, label)
}

func (s rapidSource) Pick(vs []float64, label string) float64 {
	return vs[rapid.IntRange(0, len(vs)-1).Draw(s.t, label)]
}

func (s rapidSource) Uint64(label string) uint64 { return rapid.Uint64().Draw(s.t, label) }

// byteSource decodes a fuzz input: one byte per small choice (taken modulo
// the range), eight per Uint64.
type byteSource struct {
	data []byte
	pos  int
}

func (s *byteSource) byte() byte {
	if s.pos >= len(s.data) {
		return 0
	}
	b := s.data[s.pos]
	s.pos++
	return b
}

func (s *byteSource) Int(lo, hi int, _ string) int {
	n := uint64(hi - lo + 1)
	v := uint64(s.byte())
	if n > 256 {
		v = v<<8 | uint64(s.byte())
	}
	if n > 1<<16 {
		v = v<<16 | uint64(s.byte())<<8 | uint64(s.byte())
	}
	return lo + int(v%n)
}

func (s *byteSource) Pick(vs []float64, label string) float64 {
	return vs[s.Int(0, len(vs)-1, label)]
}

func (s *byteSource) Uint64(_ string) uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(s.byte())
	}
	return v
}

// check runs prop as a rapid property (default 100 checks, or -rapid.checks).
func check(t *testing.T, prop func(failer, Source)) {
	t.Helper()
	rapid.Check(t, func(rt *rapid.T) { prop(rt, rapidSource{rt}) })
}

// fuzzBytes adapts prop to a native fuzz target over raw bytes.
func fuzzBytes(prop func(failer, Source)) func(*testing.T, []byte) {
	return func(t *testing.T, data []byte) { prop(t, &byteSource{data: data}) }
}

// fuzzImpls adapts a property of an implementation to a native fuzz target
// that runs it on each of impls, each decoding the same input from its
// start (so an input found failing on one implementation is checked on the
// others too).
func fuzzImpls(prop func(Impl) func(failer, Source), impls []Impl) func(*testing.T, []byte) {
	return func(t *testing.T, data []byte) {
		for _, impl := range impls {
			prop(impl)(t, &byteSource{data: data})
		}
	}
}

// Value palettes. Magnitudes reach float32's limits (the float32 autograd
// and mod must handle them); ref computes in float64, where they are finite.
var (
	maxF32  = float64(math.MaxFloat32)
	tinyF32 = float64(math.SmallestNonzeroFloat32)
	// routerPalette holds router weights: small integers (ties), signed
	// zeros, float32 limits, infinities. NaN is drawn separately.
	routerPalette = []float64{-2, -1, 0, 1, 2, 0.5, -0.5, math.Copysign(0, -1),
		maxF32, -maxF32, tinyF32, -tinyF32, math.Inf(1), math.Inf(-1), 1e-300, 3.25, -7.75}
	// scalePalette scales N(0,1) activations.
	scalePalette = []float64{1, 1, 1, 0.01, 100, 1e-20, 1e20, maxF32 / 4}
	// scalePalette32 scales N(0,1) activations for a float32 implementation
	// (Impl.Float32): scalePalette with its two largest scales, 1e20 and
	// float32-max/4, replaced by 1e16 and 1e18. At those, float32 overflows
	// inside a layer where the float64 result is finite: x_j² and Σ_j x_j²
	// above 1.8e19 (an l2norm router that squares in float32 without scaling, l2NormOverflow), x·W1 in the
	// predictor, r itself beyond float32's range; NaN follows where an
	// infinity meets 0 or another infinity (softmax of +Inf, w = g +
	// sg(m·g − g) with g = ±Inf, SiLU(−Inf)). With d ≤ 8 and |N(0,1)| ≤ 6,
	// Σ_j x_j² ≤ 288·scale² stays below float32 max (3.4e38) up to
	// scale = 1e18, so no such overflow is possible; the properties are
	// about routing and the residual, not float32's range.
	scalePalette32 = []float64{1, 1, 1, 0.01, 100, 1e-20, 1e16, 1e18}
)
