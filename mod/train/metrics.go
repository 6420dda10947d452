package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/modref/modref/mod"
)

// Metrics are a run's measurements: one Step per optimiser step and one
// Eval per evaluation on the held-out text.
type Metrics struct {
	Steps []Step
	Evals []Eval
}

// Step is what one training step measured. Counters (Tokens, FLOPs,
// WallSeconds) are totals since the start of the run, after this step.
type Step struct {
	// Step counts the steps taken, from 1.
	Step int
	// Tokens is the number of tokens trained on.
	Tokens int64
	// FLOPs is the training compute: 3 times the forward FLOPs of mod's
	// accounting (docs/spec.md §10; the backward pass costs about twice
	// the forward), summed over the steps.
	FLOPs float64
	// WallSeconds is the time spent in training steps (evaluations and
	// checkpoints excluded).
	WallSeconds float64
	// LR is the learning rate of this step.
	LR float64
	// Loss is the batch's next-token cross-entropy (nats per byte) and Aux
	// the routed layers' auxiliary losses, as trained.
	Loss, Aux float64
	// GradNorm is the global gradient norm before clipping.
	GradNorm float64
	// Layers describes each layer's routing on this batch.
	Layers []Layer
}

// Eval is one evaluation on the held-out text, after step Step.
type Eval struct {
	Step        int
	Tokens      int64
	FLOPs       float64
	WallSeconds float64
	// Loss is the mean next-token cross-entropy on the held-out batches.
	Loss float64
	// Layers describes each layer's routing on the held-out batches.
	Layers []Layer
}

// Layer is one layer's routing over a batch.
type Layer struct {
	// Routed is false for a dense layer, whose Fraction is 1 and whose
	// other fields are 0.
	Routed bool
	// Fraction is the fraction of tokens that went through the block.
	Fraction float64
	// WeightMean, WeightStd, WeightMin and WeightMax describe the router
	// weights r of the batch's tokens.
	WeightMean, WeightStd, WeightMin, WeightMax float64
	// PredictorAccuracy is the fraction of tokens for which the auxiliary
	// predictor's decision q > 0 agrees with the top-k decision; 0 without
	// a predictor. Since only a fraction c of tokens is chosen, predicting
	// "skip" everywhere scores 1 − c; PredictorRecall, the fraction of the
	// top-k tokens that the predictor routes, shows whether it does better.
	PredictorAccuracy float64 `json:",omitempty"`
	PredictorRecall   float64 `json:",omitempty"`
}

// appendLayerMetrics appends the summaries of the layers of a model result
// to ls.
func appendLayerMetrics(ls []Layer, res *mod.ModelResult) []Layer {
	from := len(ls)
	ls = slices.Grow(ls, len(res.Layers))[:from+len(res.Layers)]
	for l, lr := range res.Layers {
		l += from
		if lr == nil {
			ls[l] = Layer{Fraction: 1}
			continue
		}
		s := Layer{Routed: true, Fraction: lr.ComputeFraction, PredictorAccuracy: lr.PredictorAccuracy,
			WeightMin: math.Inf(1), WeightMax: math.Inf(-1)}
		var sum float64
		for _, r := range lr.RouterLogits {
			sum += float64(r)
			s.WeightMin = math.Min(s.WeightMin, float64(r))
			s.WeightMax = math.Max(s.WeightMax, float64(r))
		}
		n := float64(len(lr.RouterLogits))
		s.WeightMean = sum / n
		var ss float64
		for _, r := range lr.RouterLogits {
			d := float64(r) - s.WeightMean
			ss += float64(d * d)
		}
		s.WeightStd = math.Sqrt(ss / n)
		if lr.PredictorLogits != nil {
			hit, chosen := 0, 0
			for k, t := range lr.Targets {
				if t == 1 {
					chosen++
					if lr.PredictorLogits[k] > 0 {
						hit++
					}
				}
			}
			if chosen > 0 {
				s.PredictorRecall = float64(hit) / float64(chosen)
			}
		}
		ls[l] = s
	}
	return ls
}

// meanLayers averages per-batch layer summaries (minimum and maximum over
// the batches).
func meanLayers(batches [][]Layer) []Layer {
	out := append([]Layer(nil), batches[0]...)
	for _, ls := range batches[1:] {
		for l, s := range ls {
			o := &out[l]
			o.Fraction += s.Fraction
			o.WeightMean += s.WeightMean
			o.WeightStd += s.WeightStd
			o.PredictorAccuracy += s.PredictorAccuracy
			o.PredictorRecall += s.PredictorRecall
			o.WeightMin = math.Min(o.WeightMin, s.WeightMin)
			o.WeightMax = math.Max(o.WeightMax, s.WeightMax)
		}
	}
	n := float64(len(batches))
	for l := range out {
		out[l].Fraction /= n
		out[l].WeightMean /= n
		out[l].WeightStd /= n
		out[l].PredictorAccuracy /= n
		out[l].PredictorRecall /= n
	}
	return out
}

// WriteJSONL writes v's elements, one JSON object a line.
func WriteJSONL[T any](w io.Writer, v []T) error {
	enc := json.NewEncoder(w)
	for i := range v {
		if err := enc.Encode(&v[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadJSONL reads what WriteJSONL wrote, naming the line of an error.
func ReadJSONL[T any](data []byte) ([]T, error) {
	var v []T
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for line := 1; sc.Scan(); line++ {
		var x T
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&x); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		v = append(v, x)
	}
	return v, sc.Err()
}
