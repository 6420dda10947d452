// Package fuzz holds the fuzz targets and property tests of modref (issue 6):
// the routing invariants of Mixture-of-Depths (docs/spec.md §3, §4, §6, §7,
// §8 and §9) checked over random small configurations, and the loaders of the
// golden corpus checked against arbitrary bytes. docs/fuzzing.md lists every
// invariant, why it holds and which target checks it.
//
// The package's only non-test code is Impl, the seam through which a second
// implementation of the routed layer (the fast mod/ package) is put under
// the same properties as ref/: a property takes an Impl and reads only the
// fields of ref's result types that Impl documents. The tests define Mod,
// mod/ as an Impl, and run every applicable property on Impls = {Ref, Mod}.
package fuzz

import (
	"github.com/modref/modref/ref"

	"github.com/modref/modref/spec"
)

// Impl is one implementation of the routing computations under test. ref/
// is the first (Ref); another implementation joins by adapting its API to
// these functions and being added to Impls in the tests.
type Impl struct {
	// Name identifies the implementation in failure messages.
	Name string
	// Float32 is set for an implementation that computes in float32: the
	// generators then round every drawn input and parameter to float32
	// (saturating at ±float32 max) and keep activations below 1e18·N(0,1)
	// (scalePalette32, where no float32 intermediate of a layer
	// overflows), so that its bit-identity properties
	// (skipped tokens equal their input) are about float32 values, and
	// properties compare its outputs with its own outputs only.
	Float32 bool
	// SelectTopK is the top-k selection of docs/spec.md §4 (ref.SelectTopK's
	// contract: k[b] tokens of row b, ties to the lower position, ascending,
	// padded positions never chosen, NaN an error naming row and position).
	SelectTopK func(r [][]float64, k []int, valid []int) (ref.Selection, error)
	// SelectCausal is the causal routing decision of docs/spec.md §9
	// (ref.SelectCausal's contract: the valid positions with score > 0).
	SelectCausal func(q [][]float64, valid []int) (ref.Selection, error)
	// Layer is one routed layer with its own routing decision. Properties
	// read Out and Selection of the result, the losses RouterBCE,
	// PredictorBCE, LoadBalance and AuxLoss (padding), and Frozen where they
	// replay a decision (Frozen.Selection, Frozen.TopK, Frozen.STEOffset,
	// Frozen.PredictorInput, as ref.LayerForward fills them).
	Layer func(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs) (*ref.LayerResult, error)
	// LayerFrozen is the layer with the routing decision and the
	// stop-gradient constants taken from fz. Properties read Out, and
	// PredictorBCE for the predictor's gradient.
	LayerFrozen func(cfg spec.Config, p *ref.LayerParams, in ref.LayerInputs, fz ref.Frozen) (*ref.LayerResult, error)
	// Model is the full-sequence model forward; properties read Logits and,
	// per routed layer, Layers[l].Selection.
	Model func(c spec.ModelConfig, p *ref.ModelParams, in ref.ModelInputs) (*ref.ModelResult, error)
	// NewDecoder starts token-by-token decoding (docs/spec.md §9).
	NewDecoder func(c spec.ModelConfig, p *ref.ModelParams) (Stepper, error)
}

// Stepper is a decoder: Step feeds the next token of the sequence. Properties
// read Logits and Routed of the result.
type Stepper interface {
	Step(token int) (*ref.StepResult, error)
}

// Ref is ref/ as an Impl.
var Ref = Impl{
	Name:         "ref",
	SelectTopK:   ref.SelectTopK,
	SelectCausal: ref.SelectCausal,
	Layer:        ref.LayerForward,
	LayerFrozen:  ref.LayerForwardFrozen,
	Model:        ref.ModelForward,
	NewDecoder: func(c spec.ModelConfig, p *ref.ModelParams) (Stepper, error) {
		d, err := ref.NewDecoder(c, p)
		if err != nil {
			return nil, err
		}
		return d, nil
	},
}
