// Package fuzzcase draws the case configurations `modref fuzz` runs an
// outside implementation on, and shrinks a failing one to a smaller
// configuration that still fails (docs/fuzzing.md, "Fuzzing your
// implementation").
//
// A configuration is a golden.GenConfig, the vocabulary of
// `modref gen --config` (docs/golden-format.md): Draw builds one from a
// seed over everything docs/spec.md has, in JSON, lays the user's pinned
// part (Space.Base, `--config-base FILE`) over it, and reads the result
// with golden.DecodeGenConfig, so that every drawn configuration is one gen
// accepts, within the same size bound.
package fuzzcase

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/modref/modref/golden"
)

// Space is the space Draw draws from.
type Space struct {
	// MaxSeq is the longest sequence drawn (S); at least 1. Sizes are drawn
	// from tiny to MaxSeq, and a configuration that asks for more
	// recomputation than golden.DecodeGenConfig accepts is made smaller
	// (Fit) until it fits.
	MaxSeq int
	// Base is the part of the configuration the user pins: a JSON object
	// in GenConfig's vocabulary ({"kind": "layer", "config": {"layer":
	// {"router": "linear"}}}) laid over every draw (Overlay); nil pins
	// nothing.
	Base map[string]any
}

// maxAttempts is how many draws Draw makes before it gives up on a space
// whose pinned part no draw completes into a valid configuration.
const maxAttempts = 200

// ErrNoDraw marks a space in which no draw gives a valid configuration:
// a --config-base whose pinned fields contradict each other, or name a
// field gen does not know.
var ErrNoDraw = errors.New("no valid configuration")

// Draw returns the configuration of case index of the run seeded by seed:
// the same seed, index and space give the same configuration on every
// machine (math/rand/v2's PCG, seeded by the pair). attempt is 0 for the
// first draw of the case; a caller that cannot use the draw (its case
// cannot be generated) asks again with attempt + 1. The configuration's
// name is fuzz-<seed>-<index>, its seed drawn.
func Draw(seed uint64, index, attempt int, sp Space) (*golden.GenConfig, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(index)<<16|uint64(attempt)&0xffff))
	var last error
	for range maxAttempts {
		kind, ok := sp.Base["kind"].(string)
		if !ok {
			kind = pick(rng, kinds)
		}
		// The structure of the kind, pinned or drawn, is drawn before the
		// base is laid over it.
		raw := drawKind(rng, sp.MaxSeq, kind)
		drawAttention(rng, raw)
		drawEdges(rng, raw)
		raw["name"] = fmt.Sprintf("fuzz-%d-%d", seed, index)
		g, err := decode(Overlay(raw, sp.Base))
		if err == nil {
			g, err = Fit(g, sp.Base)
		}
		if err == nil {
			return g, nil
		}
		last = err
	}
	return nil, fmt.Errorf("%w after %d draws; the last: %v", ErrNoDraw, maxAttempts, last)
}

// decode reads a configuration from its JSON form as gen --config does.
func decode(v map[string]any) (*golden.GenConfig, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return golden.DecodeGenConfig(raw)
}

// Encode returns g's JSON form as a generic object, the form Overlay
// works on.
func Encode(g *golden.GenConfig) (map[string]any, error) {
	raw, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	return DecodeObject(raw)
}

// DecodeObject reads a JSON object as Overlay takes it, numbers kept as
// written (json.Number), so that a seed beyond 2^53 is not rounded.
func DecodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more after the JSON object")
	}
	if v == nil {
		return nil, errors.New("null, want a JSON object")
	}
	return v, nil
}

// Overlay returns drawn with base laid over it: every value base holds
// replaces the drawn one, objects are overlaid key by key, and a list of
// objects element by element (the result has base's length; an element
// base adds beyond the drawn list is laid over the drawn list's last),
// so that {"config": {"layers": [{"routed": true}, {"routed": false}]}}
// pins two layers, the first routed, and draws the rest of each.
func Overlay(drawn, base map[string]any) map[string]any {
	out := make(map[string]any, len(drawn))
	for k, v := range drawn {
		out[k] = v
	}
	for k, b := range base {
		out[k] = overlayValue(drawn[k], b)
	}
	return out
}

func overlayValue(drawn, base any) any {
	switch b := base.(type) {
	case map[string]any:
		if d, ok := drawn.(map[string]any); ok {
			return Overlay(d, b)
		}
	case []any:
		d, ok := drawn.([]any)
		if !ok || len(d) == 0 {
			return base
		}
		out := make([]any, len(b))
		for i, e := range b {
			out[i] = overlayValue(d[min(i, len(d)-1)], e)
		}
		return out
	}
	return base
}
