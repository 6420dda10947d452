package golden

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/ref"
	"github.com/modref/modref/spec"
)

// GenConfig is a case to generate (`modref gen --config FILE`), in the
// corpus's own vocabulary: a manifest's name, kind, description and config
// (docs/golden-format.md), and the seed of the draws. Everything a config
// leaves out has docs/spec.md's default, as in a manifest.
type GenConfig struct {
	// Name is the case's name, and its files' names: words of lowercase
	// letters and digits joined by '-', as a manifest's name.
	Name string `json:"name"`
	// Kind is layer, model, decode or mode.
	Kind string `json:"kind"`
	// Description says what the case is for; empty, gen writes one.
	Description string `json:"description,omitempty"`
	// Seed seeds the draws of the parameters and inputs. A draw with a
	// routing decision within 1e-2 of a tie is redrawn from the next seed;
	// the manifest records the seed of the draw kept.
	Seed uint64 `json:"seed"`
	// Config is the case's configuration, as a manifest's "config".
	Config format.CaseConfig `json:"config"`
	// Precision is the profile a candidate of the case is judged under by
	// default (the manifest's "precision"): float64, float32, tf32, bf16 or
	// fp16; empty, the case's own float32 tolerances. The catches the
	// manifest lists are measured under those.
	Precision string `json:"precision,omitempty"`
	// Ties makes a layer case about its tie rule (a linear router without
	// bias, top-k routing): "exact" gives, in every row, the first token
	// left out exactly the router weight of the last one selected (as
	// layer-ties); "bf16" puts them 1e-4 apart with inputs that round to
	// the same bf16 values, ties only bf16 sees (as layer-ties-bf16). Such
	// a case is tuned after its draw, so that its gaps are below 1e-2.
	Ties string `json:"ties,omitempty"`
	// Threshold makes a layer case routed causally (docs/spec.md §9) about
	// its threshold: in every row the valid token whose routing score is
	// nearest 0 gets input 0, so that its score is exactly 0 and it is not
	// routed (as layer-causal-threshold). Routed by the router, the router
	// must be linear (r = x·w = 0); by the predictor, its biases PredB1
	// and PredB2 are drawn 0, so that q = SiLU(0·W1)·W2 = 0 in any
	// precision. Such a case is tuned after its draw: its gaps are 0.
	Threshold bool `json:"threshold,omitempty"`
}

// MaxGenConfigBytes bounds a --config file: a manifest's config is a few
// kilobytes.
const MaxGenConfigBytes = 1 << 20

// DecodeGenConfig reads a GenConfig from raw JSON: one object, no unknown
// field, a valid name and kind, and a configuration that is valid (package
// spec's rules and size bounds) and within what a reader of the case will
// recompute (maxRecomputeWork). Each error names the field.
func DecodeGenConfig(raw []byte) (*GenConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var g GenConfig
	if err := dec.Decode(&g); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// Field is the path of JSON keys, with the embedded
			// struct that holds a block's keys in it.
			return nil, fmt.Errorf("%s is a JSON %s, want %s", strings.ReplaceAll(te.Field, "blockJSON.", ""), te.Value, jsonKind(te.Type))
		}
		return nil, fmt.Errorf("not a case configuration: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a case configuration: more after its JSON object")
	}
	if !format.ValidCaseName(g.Name) {
		return nil, fmt.Errorf("name = %q: want words of lowercase letters and digits joined by '-', such as my-layer-s2048", g.Name)
	}
	if !slices.Contains([]string{format.KindLayer, format.KindModel, format.KindDecode, format.KindMoDE}, g.Kind) {
		return nil, fmt.Errorf("kind = %q: want %s, %s, %s or %s", g.Kind, format.KindLayer, format.KindModel, format.KindDecode, format.KindMoDE)
	}
	if err := g.Config.Validate(g.Kind); err != nil {
		return nil, err
	}
	if p, err := format.ParseProfile(g.Precision); err != nil {
		return nil, err
	} else if err := p.Judges(g.Config); err != nil {
		return nil, fmt.Errorf("precision = %q: %w", g.Precision, err)
	}
	if err := g.checkTies(); err != nil {
		return nil, err
	}
	if err := g.checkThreshold(); err != nil {
		return nil, err
	}
	if err := g.checkRepresentable(); err != nil {
		return nil, err
	}
	m := &format.Manifest{Kind: g.Kind, Config: g.Config}
	if n := 2 * format.ParamCount(m); n > format.MaxCaseElements {
		return nil, fmt.Errorf("config: the case would hold %d parameter values and as many gradients, more than the %d values a case may hold together (the sizes d_model, d_ff, layers, vocab): %w",
			n/2, int64(format.MaxCaseElements), format.ErrTooLarge)
	}
	if n, _ := format.CaseValues(m); n > format.MaxCaseElements {
		return nil, fmt.Errorf("config: the case would hold at least %.4g values (its parameters and their gradients, and its B×S×d_model or B×S×vocab arrays), more than the %d a case may hold together (batch %d, seq_len %d, the sizes): %w",
			n, int64(format.MaxCaseElements), g.Config.Batch, g.Config.SeqLen, format.ErrTooLarge)
	}
	if n := format.MinManifestBytes(m); n > format.MaxManifestBytes {
		return nil, fmt.Errorf("config: the case's manifest would take at least %.4g bytes, more than the %d a reader reads (its routing gaps are one per routed layer and row: batch %d): %w",
			n, format.MaxManifestBytes, g.Config.Batch, format.ErrTooLarge)
	}
	if w, most := format.RecomputeWork(m), float64(format.MaxRecomputeWork); w > most {
		return nil, fmt.Errorf("config: recomputing the case under every deviation would take about %.3g multiply-adds (attention scores counted), more than the %.3g a reader accepts (batch %d, seq_len %d, the sizes): %w",
			w, most, g.Config.Batch, g.Config.SeqLen, format.ErrTooLarge)
	}
	if fixed, per := format.GenMemory(m); fixed+per > format.MaxGenMemory {
		return nil, fmt.Errorf("config: generating the case and measuring its catches would take about %.1f GiB of memory, more than the %d GiB gen accepts (batch %d, seq_len %d, the sizes): %w",
			(fixed+per)/(1<<30), format.MaxGenMemory>>30, g.Config.Batch, g.Config.SeqLen, format.ErrTooLarge)
	}
	// After the bounds, which a fuzzer's draw meets by shortening the
	// sequence (fuzzcase.Fit).
	if err := g.Config.FitsSeqLen(g.Kind); err != nil {
		return nil, err
	}
	return &g, nil
}

// MaxDescriptionBytes bounds a generated case's description, so that its
// manifest stays far within the 1 MiB a reader reads (format.MaxManifestBytes);
// the corpus's are under 1 KB.
const MaxDescriptionBytes = 1 << 16

// maxGenWeight bounds the jitter scale s and the auxiliary and
// load-balancing weights of a generated case: the self-check computes the
// case in float32, whose range (3.4e38) a weight of 1e300 overflows (the
// loss becomes infinite), while 1e15 still passes it. A configuration
// above it is refused before anything is generated.
const maxGenWeight = 1e12

// checkRepresentable refuses what would make a case no reader loads: a
// description longer than MaxDescriptionBytes, and a jitter or a weight
// above maxGenWeight.
func (g *GenConfig) checkRepresentable() error {
	if len(g.Description) > MaxDescriptionBytes {
		return fmt.Errorf("description: %d bytes, more than the %d a case's description may have (its manifest is read up to 1 MiB): %w", len(g.Description), MaxDescriptionBytes, format.ErrTooLarge)
	}
	type layer struct {
		where string
		cfg   spec.Config
	}
	var layers []layer
	if l := g.Config.Layer; l != nil {
		layers = append(layers, layer{"config.layer", *l})
	}
	for i, l := range g.Config.Layers {
		layers = append(layers, layer{fmt.Sprintf("config.layers[%d]", i), l.Config})
	}
	for _, l := range layers {
		for _, f := range []struct {
			name string
			v    float64
		}{{"jitter", l.cfg.Jitter}, {"aux_weight", l.cfg.AuxWeight}, {"load_balance_weight", l.cfg.LoadBalanceWeight}} {
			if f.v > maxGenWeight {
				return fmt.Errorf("%s.%s = %g: at most %g, so that the case's values stay within float32's range, in which its self-check computes it", l.where, f.name, f.v, maxGenWeight)
			}
		}
	}
	return nil
}

// checkLoadable refuses a generated case (before its catches are
// measured) that a reader would not load or that holds a value float64
// does not represent: its arrays within maxCaseElements, every value
// finite, and its manifest, with every deviation as a catch, within
// format.MaxManifestBytes (per-row routing gaps at a large batch can exceed it).
func checkLoadable(c *format.Case) error {
	if _, err := c.Manifest.CheckBounds(); err != nil {
		return fmt.Errorf("config: the case would not load: %w", err)
	}
	for _, info := range c.Manifest.Arrays {
		if a := c.Arrays[info.Name]; a != nil {
			if k := a.FirstNonFinite(); k >= 0 {
				return fmt.Errorf("config: the case's %s holds %v at %v, which no reader accepts; lower the weights or sizes", info.Name, a.F[k], a.Index(k))
			}
		}
	}
	m := *c.Manifest
	m.Catches = nil
	for _, d := range format.Deviations {
		m.Catches = append(m.Catches, d.Name)
	}
	raw, err := m.Encode()
	if err != nil {
		return err
	}
	if len(raw) > format.MaxManifestBytes {
		return fmt.Errorf("config: the case's manifest would take %d bytes, more than the %d a reader reads (its routing gaps are one per routed layer and row: batch %d): %w", len(raw), format.MaxManifestBytes, c.Manifest.Config.Batch, format.ErrTooLarge)
	}
	return nil
}

// jsonKind names the JSON value a Go type reads.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// checkTies checks the Ties field: empty, or "exact" or "bf16" on a layer
// case routed top-k by a linear router without bias.
func (g *GenConfig) checkTies() error {
	switch {
	case g.Ties == "":
		return nil
	case g.Ties != "exact" && g.Ties != "bf16":
		return fmt.Errorf("ties = %q: want \"exact\" or \"bf16\"", g.Ties)
	case g.Kind != format.KindLayer || g.Config.Layer.Router != spec.RouterLinear || g.Config.Layer.Causal != spec.CausalOff:
		return fmt.Errorf("ties = %q: a case about ties is a layer case routed top-k by a linear router without bias", g.Ties)
	}
	return nil
}

// checkThreshold checks the Threshold field: false, or true on a layer
// case routed causally, by a linear router or by the predictor.
func (g *GenConfig) checkThreshold() error {
	if !g.Threshold {
		return nil
	}
	if g.Kind != format.KindLayer || g.Config.Layer.Causal == spec.CausalOff ||
		g.Config.Layer.Causal == spec.CausalRouter && g.Config.Layer.Router != spec.RouterLinear || g.Config.Layer.MLPOnly {
		return fmt.Errorf("threshold = true: a case about the causal threshold is a layer case routed causally, by a linear router without bias or by the predictor, of its whole block (its score reads the layer's input, which the case sets to 0; not mlp_only)")
	}
	return nil
}

// GenConfigOf returns the configuration that generates case name of corpus
// c again (`modref gen --print-config CASE`): its name, kind,
// description, configuration and the seed of its draw, and, for a layer
// case about ties or the causal threshold (routing.ties), its ties or
// threshold. A model case about ties (model-ties) or with rows routed
// apart is tuned after its draw in a way a GenConfig does not state: its
// configuration generates a case of the same configuration, not the same
// bits.
func GenConfigOf(c format.Corpus, name string) (*GenConfig, error) {
	m, err := c.Manifest(name)
	if err != nil {
		return nil, err
	}
	g := &GenConfig{Name: m.Name, Kind: m.Kind, Description: m.Description, Seed: m.Provenance.Seed, Config: m.Config, Precision: m.Precision}
	if m.Kind == format.KindLayer && m.Routing.Ties {
		// A layer case tuned after its draw says so in routing.ties:
		// causally routed, about its threshold; else about ties, exact
		// when every gap is 0 (layer-ties), within bf16's rounding when
		// not (layer-ties-bf16). The seed is the kept draw's, so the
		// tuning is made again on the same draw.
		switch {
		case m.Config.Layer.Causal != spec.CausalOff:
			g.Threshold = true
		case slices.ContainsFunc(slices.Concat(m.Routing.Gaps...), func(v float64) bool { return v != 0 }):
			g.Ties = "bf16"
		default:
			g.Ties = "exact"
		}
	}
	return g, nil
}

// GenerateFromConfig generates the case g describes, as the corpus's cases
// are generated (redrawn until every routing decision is clear of a tie),
// with its catches measured: every deviation of docs/spec.md §11 emulated
// for the case whose values the case tells apart from the oracle's under
// its float32 tolerances, which tol sets first.
func GenerateFromConfig(g *GenConfig, tol Tolerancer) (*format.Case, error) {
	c, truth, err := generateCaseTruth(g)
	if err != nil {
		return nil, err
	}
	// The case must be one a reader loads (DecodeGenConfig refuses early
	// what its parameters and their gradients alone exceed).
	if err := checkLoadable(c); err != nil {
		return nil, err
	}
	if err := tol.apply(c); err != nil {
		return nil, err
	}
	if truth != nil {
		c.Manifest.Catches, err = diagnose.MeasuredLayerCatches(c, truth)
	} else {
		c.Manifest.Catches, err = diagnose.MeasuredCatches(c)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// generateCase generates the case g describes, with no catches.
func generateCase(g *GenConfig) (*format.Case, error) {
	c, _, err := generateCaseTruth(g)
	return c, err
}

// generateCaseTruth is generateCase, and for a layer case ref's forward
// pass of it kept for the backward pass (genLayerTruth), or nil.
func generateCaseTruth(g *GenConfig) (*format.Case, *ref.LayerResult, error) {
	cfg := g.Config
	desc := g.Description
	if desc == "" {
		desc = fmt.Sprintf("A %s case generated by modref gen --config.", g.Kind)
	}
	var c *format.Case
	var truth *ref.LayerResult
	var err error
	switch g.Kind {
	case format.KindLayer:
		c, truth, err = genLayerTruth(oracle.LayerSpec{Name: g.Name, Description: desc, Seed: g.Seed,
			Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: *cfg.Layer,
			Ties: g.Ties != "", RoundingTies: g.Ties == "bf16", Threshold: g.Threshold})
	case format.KindModel, format.KindDecode:
		c, err = genModel(oracle.ModelSpec{Name: g.Name, Description: desc, Seed: g.Seed,
			Batch: cfg.Batch, SeqLen: cfg.SeqLen, Valid: cfg.ValidLengths, Config: cfg.ModelConfig(), Decode: g.Kind == format.KindDecode})
	case format.KindMoDE:
		c, err = genMoDE(oracle.MoDESpec{Name: g.Name, Description: desc, Seed: g.Seed,
			Batch: cfg.Batch, SeqLen: cfg.SeqLen, Config: *cfg.MoDE})
	default:
		return nil, nil, fmt.Errorf("kind %q", g.Kind)
	}
	if err == nil {
		c.Manifest.Precision = g.Precision
		if d := format.NarrowLayerNorm(cfg); d > 0 {
			c.Manifest.Description += fmt.Sprintf(" Ill conditioned by construction: LayerNorm over d = %d features, fewer than %d, maps its input onto a sphere of dimension %d (at d = 2 its output is ±1 whatever the input, and the gradients through it cancel but for eps); an implementation that keeps every tensor in bf16 or fp16 computes them as the round-off of what cancelled, so the bf16 and fp16 profiles do not judge it (judge it under float32 or tf32; docs/tolerances.md, \"LayerNorm at tiny widths\").", d, MinLayerNormD, max(d-2, 0))
		}
	}
	return c, truth, err
}

// MinLayerNormD is the narrowest LayerNorm the bf16 and fp16 profiles
// judge (format.MinLayerNormD): fuzz draws none narrower
// (fuzzcase.MinLayerNormD), and gen --config marks a narrower one in its
// case's description.
const MinLayerNormD = format.MinLayerNormD
