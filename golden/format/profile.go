package format

import (
	"fmt"
	"strings"

	"github.com/modref/modref/internal/lowp"
	"github.com/modref/modref/spec"
)

// Profile is the precision a candidate computes in, as a manifest's
// "precision" names it, and so the tolerances it is judged by
// (docs/tolerances.md, "Precision profiles"; judge.Tolerances computes them). Under a
// profile, an array's tolerance is not the manifest's: it comes from a
// same-precision baseline, the rule of FlashAttention's tests. An emulated
// implementation of the profile runs the case, in each of the ways of its
// family (modcase.EmulateFamily); their largest error against the float64
// truth, per array, times Multiple, plus a floor of FloorUnits roundings
// of the array's scale and of AbsUnit, is the array's absolute tolerance.
//
// The zero Profile is the manifests' own tolerances (float32 against
// float64), what `modref check` uses without --precision.
type Profile struct {
	// Name is the profile's flag value: float64, float32, tf32, bf16, fp16.
	Name string
	// Products is the format the emulation's matrix products read their
	// operands in (nil: float32 or float64 throughout), and Storage the
	// format its inputs, parameters and products' results are stored in
	// (nil: float32, or float64 for the float64 profile).
	Products, Storage *lowp.Format
	// Unit is the unit roundoff of the coarsest format the implementation
	// computes in (2⁻⁸ for bf16, 2⁻¹¹ for fp16 and tf32, 2⁻²⁴ for
	// float32, 2⁻⁵³ for float64): the floor's unit.
	Unit float64
}

// The profile rule's constants (docs/tolerances.md gives the measurements
// behind them).
const (
	// Multiple is how many times the emulated baseline's error a candidate
	// may err. FlashAttention allows 2; a real implementation rounds at
	// other points than the emulation (PyTorch's autocast stores
	// elementwise results in the format too): PyTorch under bf16 autocast
	// erred by a median 1.15 and a 90th percentile 2.4 times the
	// emulation's error per array on the corpus, and with the floor its
	// worst array came to 0.92 of its tolerance (layer-gqa's
	// grad.param.Wk; 0.28 to 0.57 on the same configuration's other
	// seeds).
	Multiple = 4
	// FloorUnits is the floor in roundings (Unit) of the array's scale
	// ‖e‖∞, plus as many of AbsUnit, for every profile but float64: an
	// array the family happens to compute exactly (a loss that is 0, an
	// exactly representable sum) still allows the format's rounding of its
	// values.
	FloorUnits = 4
	// float64FloorUnits is the float64 profile's floor: its emulation is
	// ref itself, whose error is 0, so the floor alone must allow another
	// float64 implementation's summation order, which measured up to 14.4
	// units (PyTorch in float64 on the corpus, docs/tolerances.md).
	float64FloorUnits = 64
)

// Profiles lists the profiles by name, in order of precision.
var Profiles = []Profile{
	{Name: "float64", Unit: 0x1p-53},
	{Name: "float32", Unit: 0x1p-24},
	{Name: "tf32", Products: &lowp.TF32, Unit: lowp.TF32.Epsilon()},
	{Name: "bf16", Products: &lowp.BF16, Storage: &lowp.BF16, Unit: lowp.BF16.Epsilon()},
	{Name: "fp16", Products: &lowp.FP16, Storage: &lowp.FP16, Unit: lowp.FP16.Epsilon()},
}

// ProfileNames returns the profiles' names, for flag help and errors.
func ProfileNames() []string {
	var n []string
	for _, p := range Profiles {
		n = append(n, p.Name)
	}
	return n
}

// ParseProfile returns the profile of a name; "" is the zero Profile, the
// manifests' own tolerances.
func ParseProfile(name string) (Profile, error) {
	if name == "" {
		return Profile{}, nil
	}
	for _, p := range Profiles {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("precision %q: want one of %s", name, strings.Join(ProfileNames(), ", "))
}

// FloorUnits returns the profile's floor in roundings of an array's scale.
func (p Profile) FloorUnits() float64 {
	if p.Name == "float64" {
		return float64FloorUnits
	}
	return FloorUnits
}

// AbsUnit returns the unit of the floor's absolute part: float32's unit
// roundoff 2⁻²⁴ (float64's 2⁻⁵³ for the float64 profile), the rounding
// of values of order one in the float32 sums every profile but float64
// accumulates in, which an array that is small by cancellation carries
// from the values that cancelled.
func (p Profile) AbsUnit() float64 {
	if p.Name == "float64" {
		return 0x1p-53
	}
	return 0x1p-24
}

// IsZero reports whether p is the zero Profile, the manifests' tolerances.
func (p Profile) IsZero() bool { return p.Name == "" }

// MinLayerNormD is the narrowest LayerNorm the bf16 and fp16 profiles
// judge. LayerNorm over d features maps its input onto a sphere of
// dimension d − 2 (at d = 2 its output is ±1 whatever the input), so the
// gradients through a narrower one cancel but for eps, and an
// implementation that keeps every tensor in bf16 or fp16 computes them as
// the round-off of what cancelled: PyTorch with every tensor in bf16 erred
// by 27 to 7,200 times the bf16 tolerances at d = 2 and 1.0 to 1.4 at
// d = 4 (docs/tolerances.md, "LayerNorm at tiny widths"). fuzz draws none
// narrower.
const MinLayerNormD = 8

// NarrowLayerNorm returns the width of the narrowest block of cfg that
// normalises by LayerNorm over fewer than MinLayerNormD features, or 0.
func NarrowLayerNorm(cfg CaseConfig) int {
	d := 0
	for _, b := range blocksOf(cfg) {
		if b.Norm == spec.NormLayer && b.D < MinLayerNormD && (d == 0 || b.D < d) {
			d = b.D
		}
	}
	return d
}

// MinCoarseD is the narrowest block the bf16 and fp16 profiles judge. A
// token of fewer features keeps a handful of bf16 digits in all (attention
// over heads of 2 to 4, a norm over 2 to 4 values), and a correct
// implementation that keeps every tensor in the format computes its
// gradients as the round-off of what cancels: PyTorch in pure bf16 flipped
// the sign of a value gradient of 1.04 at d = 2 (fuzz-23-81, RMSNorm; the
// family's own error there 0.34), and LayerNorm below d = 8 is ill
// conditioned by construction (MinLayerNormD). fuzz draws none narrower
// under those profiles (docs/tolerances.md, "LayerNorm at tiny widths").
const MinCoarseD = 8

// narrowestBlock returns the smallest width of cfg's blocks.
func narrowestBlock(cfg CaseConfig) int {
	d := 0
	for _, b := range blocksOf(cfg) {
		if d == 0 || b.D < d {
			d = b.D
		}
	}
	return d
}

// blocksOf returns the block configurations of cfg's layers.
func blocksOf(cfg CaseConfig) []spec.BlockConfig {
	var blocks []spec.BlockConfig
	if cfg.Layer != nil {
		blocks = append(blocks, cfg.Layer.Block)
	}
	if cfg.MoDE != nil {
		blocks = append(blocks, cfg.MoDE.Block)
	}
	for _, l := range cfg.Layers {
		blocks = append(blocks, l.Config.Block)
	}
	return blocks
}

// Judges returns an error when p cannot judge a case of configuration cfg
// without failing correct implementations: a profile that stores every
// tensor in a coarse format (bf16, fp16) on a case with a block narrower
// than MinCoarseD (LayerNorm there is ill conditioned by construction).
// No tolerance that would hold there would still catch a bug: judge such a
// case under float32 or tf32.
func (p Profile) Judges(cfg CaseConfig) error {
	if p.Storage == nil {
		return nil
	}
	if d := NarrowLayerNorm(cfg); d > 0 {
		return fmt.Errorf("the %s profile does not judge a case with LayerNorm over d = %d features, fewer than %d: ill conditioned by construction, its gradients are the round-off of what cancels, which an implementation that keeps every tensor in %s computes without a bug (docs/tolerances.md, \"LayerNorm at tiny widths\"); judge it under float32 or tf32, or use d ≥ %d",
			p.Name, d, MinLayerNormD, p.Name, MinLayerNormD)
	}
	if d := narrowestBlock(cfg); d < MinCoarseD {
		return fmt.Errorf("the %s profile does not judge a case with a block of d = %d features, fewer than %d: its gradients are the round-off of what cancels, which an implementation that keeps every tensor in %s computes without a bug (docs/tolerances.md, \"LayerNorm at tiny widths\"); judge it under float32 or tf32, or use d ≥ %d",
			p.Name, d, MinCoarseD, p.Name, MinCoarseD)
	}
	return nil
}
