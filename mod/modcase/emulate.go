package modcase

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/oracle"
	"github.com/modref/modref/internal/lowp"
	"github.com/modref/modref/spec"
)

// Member is one emulated implementation of a precision profile's family
// (EmulateFamily): its name, saying which choices it makes, and the arrays
// it computed under candidate names.
type Member struct {
	Name   string
	Arrays map[string]*format.Array
}

// EmulateFamily runs the family of emulated implementations of a
// precision profile on a case: the implementation choices correct code
// makes, each array's tolerance then taken from the worst of them
// (judge.Tolerances; docs/tolerances.md, "The family"). The first member
// is Emulate's. The others:
//
//   - float32, tf32: the same with LayerNorm's statistics, its backward
//     pass and every reduction's and loss's sum in float32 by pairwise
//     summation (autograd.StatsTwoPass32: PyTorch's kernels), and, when
//     the case has a LayerNorm, with the variance in one pass,
//     mean(x²) − mean(x)² (autograd.StatsOnePass32: fused kernels); the
//     losses' gradients, as with every float32-sums member, in PyTorch's
//     order (σ and softmax's p rounded before the target is subtracted).
//   - bf16, fp16: every tensor in the format (autograd.Rounding.Store:
//     module.to(torch.bfloat16)), the residual stream, norms, softmax
//     and losses included, with float32 statistics and sums; and, when
//     the case has a LayerNorm, the same with one-pass statistics.
//   - bf16: the first member with every matrix product of at most 16³
//     multiply-adds, and its weight gradient, accumulated in bf16
//     (cpuAccumulatesInBF16: PyTorch 1.13 on a CPU, pure bf16 and
//     autocast alike).
//   - every profile but float64: randomRoundingDraws draws of random
//     rounding (randomRounding).
//   - float64: ref alone; another float64 implementation's summation
//     order is the floor's (judge.Tolerances).
//
// The float32-statistics members compute RMSNorm as x / sqrt(mean(x²) +
// eps) written out in float32 operations and differentiate it as
// PyTorch's autograd does (autograd.Rounding.RMSDivide); the first member
// and the random rounding ones keep mod's x·rsqrt(·).
//
// The members' matrix products run on the fastest kernels this machine
// has, whose last bits differ between kernel paths: PortableFamily is the
// same family with the bits of every machine.
func EmulateFamily(c *format.Case, p format.Profile) ([]Member, error) {
	return emulateFamily(c, p, false)
}

// PortableFamily is EmulateFamily with every member's products with the
// bits of the Go loops (autograd.Rounding.Portable; SIMD kernels that
// multiply and then add on amd64): the same bits on every machine and
// kernel path (docs/tolerances.md, "The golden corpus"), for the
// tolerances a generated case carries.
func PortableFamily(c *format.Case, p format.Profile) ([]Member, error) {
	return emulateFamily(c, p, true)
}

// emulateFamily is EmulateFamily, with the products on the Go loops' bits
// when portable is set.
func emulateFamily(c *format.Case, p format.Profile, portable bool) ([]Member, error) {
	if p.Name == "float64" {
		return float64Family(c, portable)
	}
	var fam []Member
	err := eachMember(c, p, portable, nil, func(m Member) error {
		fam = append(fam, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return fam, nil
}

// eachMember computes the members of the family of a profile p other
// than float64 (EmulateFamily) one after the other, in EmulateFamily's
// order, and hands each to f as it is computed, so that a caller that
// reduces a member to what it needs holds one member's arrays at a time;
// an error from f stops it. The products run on the Go loops' bits when
// portable is set. With free, f keeps nothing of a member's arrays, and
// each member's float arrays are written into the last one's (freeFloats),
// its forward and backward passes run on the last one's tape, and a layer
// case's mod layer and inputs are built once (caseLayer).
func eachMember(c *format.Case, p format.Profile, portable bool, free *freeFloats, f func(Member) error) error {
	if free != nil {
		g := f
		f = func(m Member) error {
			err := g(m)
			free.put(m.Arrays)
			return err
		}
	}
	var tape *autograd.Tape
	var layer *caseLayer
	if free != nil {
		tape, layer = new(autograd.Tape), new(caseLayer)
	}
	em := emulationOf(p)
	em.rnd.Portable = portable
	em.free, em.tape, em.layer = free, tape, layer
	base, err := emulate(c, p, em)
	if err != nil {
		return err
	}
	if err := f(Member{Name: p.Name, Arrays: base}); err != nil {
		return err
	}
	stats := []autograd.Stats{autograd.StatsTwoPass32}
	if hasLayerNorm(c.Manifest.Config) {
		stats = append(stats, autograd.StatsOnePass32)
	}
	for _, st := range stats {
		em := emulationOf(p)
		em.rnd.Portable = portable
		em.free, em.tape, em.layer = free, tape, layer
		em.rnd.Stats = st
		em.rnd.RMSDivide = true
		name := p.Name + ", float32 sums and norm statistics, RMSNorm as x / sqrt(·)"
		if p.Storage != nil {
			em.rnd.Store = p.Storage.Round32
			em.rnd.NormSums = true
			name = p.Name + " throughout (every tensor in the format), float32 sums and norm statistics, RMSNorm as x / sqrt(·)"
		}
		if st == autograd.StatsOnePass32 {
			name += " in one pass"
		}
		got, err := emulate(c, p, em)
		if err != nil {
			return err
		}
		if err := f(Member{Name: name, Arrays: got}); err != nil {
			return err
		}
	}
	if p.Storage == &lowp.BF16 {
		em := emulationOf(p)
		em.rnd.Portable = portable
		em.free, em.tape, em.layer = free, tape, layer
		em.rnd.Accumulate = cpuAccumulatesInBF16
		got, err := emulate(c, p, em)
		if err != nil {
			return err
		}
		if err := f(Member{Name: p.Name + ", products of at most 16³ multiply-adds accumulated in bf16 (PyTorch 1.13 on a CPU)", Arrays: got}); err != nil {
			return err
		}
	}
	for k := range randomRoundingDraws {
		rr := randomRounding(p, randomRoundingSeed+uint64(k))
		rr.rnd.Portable = portable
		rr.free, rr.tape, rr.layer = free, tape, layer
		got, err := emulate(c, p, rr)
		if err != nil {
			return err
		}
		if err := f(Member{Name: fmt.Sprintf("%s with random rounding (Monte Carlo arithmetic), draw %d of %d", p.Name, k+1, randomRoundingDraws), Arrays: got}); err != nil {
			return err
		}
	}
	return nil
}

// cpuAccumulatesInBF16 says whether PyTorch 1.13 on a CPU accumulates a
// bf16 product of an m×k and a k×n matrix in bf16 (autograd.Rounding.Accumulate):
// a product of at most 16³ multiply-adds (mkldnn_gemm_min_size) runs in
// its fallback kernel, c += a·b in bf16, each term and partial sum
// rounded; a larger one runs in oneDNN, which accumulates in float32, on
// a CPU with AVX-512 (measured with Debian's PyTorch 1.13, bit for bit;
// docs/tolerances.md, "Products accumulated in bf16"). Under autocast
// too, which casts to bf16 and calls the same kernel.
func cpuAccumulatesInBF16(m, k, n int) bool { return m*k*n <= 16*16*16 }

// randomRoundingSeed seeds the first random rounding member and the
// others the seeds after it, so that a case's tolerances are the same at
// every run.
const randomRoundingSeed = 33

// randomRoundingDraws is how many random rounding members a family has.
// One draw is a sample of one from a wide distribution: on the arrays
// whose round-off a small change upstream amplifies, twelve draws' errors
// spread over a factor 10 to 100 (fuzz-13-56's grad.param.Norm1 in
// float32 from 6.3e-8 to 1.7e-6; fuzz-11-88's grad.param.L3.RouterBias in
// bf16 from 7.3e-5 to 8.1e-3), and seed 33 alone drew low where correct
// PyTorch implementations failed (docs/tolerances.md, "Monte Carlo
// draws").
const randomRoundingDraws = 4

// randomRounding returns the emulation of p, drawn from seed, whose every stored value
// (every operation's output, every product's result and operand as the
// profile stores them, every gradient) is perturbed by a random relative
// error of up to one unit roundoff before it is rounded to its format:
// Monte Carlo arithmetic (Parker, 1997) at the tensors' granularity. Its
// errors are another draw of the round-off, and on an array that is
// nearly 0 by cancellation they are the rounding of what cancelled, which
// a deterministic emulation may happen to get exactly.
func randomRounding(p format.Profile, seed uint64) emulation {
	em := emulationOf(p)
	em.rnd.Stats = autograd.StatsTwoPass32
	rng := rand.New(rand.NewPCG(seed, 0))
	perturb := func(unit float64, round func(float64) float64) func(float32) float32 {
		return func(v float32) float32 {
			return float32(round(float64(v) * (1 + float64(unit*(float64(2*float64(rng.Float64()))-1)))))
		}
	}
	to32 := func(x float64) float64 { return float64(float32(x)) }
	store, unit := to32, 0x1p-24
	if p.Storage != nil {
		// Rounding a float32 value to a coarser format, half a unit of
		// perturbation already moves it to either neighbour; a value
		// rounded to float32 again needs the whole unit to move at all.
		store, unit = p.Storage.Round, p.Unit/2
		em.rnd.NormSums = true
	}
	em.rnd.Store = perturb(unit, store)
	em.rnd.Result = perturb(unit, store)
	if p.Products != nil {
		em.rnd.Operand = perturb(p.Products.Epsilon()/2, p.Products.Round)
	}
	return em
}

// sameRouting reports whether two candidates' integer arrays (the routing
// decisions) and 0/1 targets are equal.
func sameRouting(a, b map[string]*format.Array) bool {
	for name, x := range a {
		y := b[name]
		if y == nil {
			continue
		}
		if x.I != nil || strings.HasSuffix(name, "targets") || strings.HasSuffix(name, "routed") {
			if !slices.Equal(x.I, y.I) || !slices.Equal(x.F, y.F) {
				return false
			}
		}
	}
	return true
}

// float64Scale is the float64 unit roundoff over float32's: the float64
// family's errors are the float32 family's scaled by it.
const float64Scale = 0x1p-53 / 0x1p-24

// float64Family returns the float64 profile's family: ref itself (error
// 0) and, for each member of the float32 family, the truth plus that
// member's error scaled from float32's unit roundoff to float64's. An
// array's round-off is its condition times the unit: where the float32
// implementations disagree with the truth by k units, another float64
// implementation (another summation order, a fused kernel) may by about k
// units of float64, and an array that is nearly 0 by cancellation gets
// the rounding of what cancelled.
func float64Family(c *format.Case, portable bool) ([]Member, error) {
	truth, err := oracle.RefCandidate(c)
	if err != nil {
		return nil, err
	}
	f32, _ := format.ParseProfile("float32")
	fam32, err := emulateFamily(c, f32, portable)
	if err != nil {
		return nil, err
	}
	fam := []Member{{Name: "float64 (ref)", Arrays: truth}}
	for _, m := range fam32 {
		if !sameRouting(m.Arrays, truth) {
			// A float32 implementation that flips a near-tie measures the
			// flip, not float64's round-off.
			continue
		}
		scaled := map[string]*format.Array{}
		for name, a := range m.Arrays {
			t := truth[name]
			if a.F == nil || t == nil || len(t.F) != len(a.F) {
				scaled[name] = a
				continue
			}
			f := make([]float64, len(a.F))
			for k, v := range a.F {
				f[k] = t.F[k] + float64((v-t.F[k])*float64Scale)
			}
			scaled[name] = &format.Array{Shape: a.Shape, F: f, DType: "<f8"}
		}
		fam = append(fam, Member{Name: "float64, scaled from " + m.Name, Arrays: scaled})
	}
	return fam, nil
}

// FamilyArrays returns the members' arrays, for judge.Tolerances.
func FamilyArrays(fam []Member) []map[string]*format.Array {
	out := make([]map[string]*format.Array, len(fam))
	for i, m := range fam {
		out[i] = m.Arrays
	}
	return out
}

// hasLayerNorm reports whether any block of a case's configuration
// normalises with LayerNorm.
func hasLayerNorm(cfg format.CaseConfig) bool {
	if cfg.Layer != nil && cfg.Layer.Block.Norm == spec.NormLayer {
		return true
	}
	if cfg.MoDE != nil && cfg.MoDE.Block.Norm == spec.NormLayer {
		return true
	}
	for _, l := range cfg.Layers {
		if l.Config.Block.Norm == spec.NormLayer {
			return true
		}
	}
	return false
}

// Emulate runs an emulated implementation of a precision profile on a case
// and returns its arrays under candidate names: the baseline that
// judge.Tolerances measures. The points it rounds
// (docs/tolerances.md, "Precision profiles"):
//
//   - float64: ref itself (oracle.RefCandidate), the truth's own
//     arithmetic; its error is 0 and only the floor remains.
//   - every profile but float64: the rotary angles computed in float32
//     (nn.RoPE.Float32Angles), as PyTorch and Hugging Face implementations
//     compute them even under autocast: at thousands of positions their
//     error is the largest such an implementation makes (at S = 2048 it
//     made PyTorch's float32 error on the query and key weight gradients
//     12 times that of an emulation with mod's float64 angles).
//   - float32: mod on the case, float32 throughout.
//   - tf32: mod with every matrix product's and attention's operands
//     rounded to tf32 (autograd.Rounding.Operand), accumulation and
//     results in float32, as tensor cores compute with TF32 enabled.
//   - bf16, fp16: the case's inputs, parameters and upstream gradient
//     rounded to the format (a low-precision model's tensors), products'
//     operands and results and attention's q, k, v and output rounded
//     (autocast stores a product's result in the format), their gradients
//     likewise, and every array written rounded (the candidate's tensors
//     are in the format). Norms, softmax, losses and elementwise
//     operations stay float32, as autocast keeps them.
//
// Where the emulation routes a near-tie otherwise than the truth (a
// decision within the format's error of a tie), judge.Tolerances
// measures its errors against the truth at its own decisions.
func Emulate(c *format.Case, p format.Profile) (map[string]*format.Array, error) {
	switch {
	case p.IsZero():
		return nil, fmt.Errorf("the zero profile has no emulation: its tolerances are the manifest's")
	case p.Name == "float64":
		return oracle.RefCandidate(c)
	}
	return emulate(c, p, emulationOf(p))
}

// emulationOf returns the emulation of profile p that Emulate runs.
func emulationOf(p format.Profile) emulation {
	em := emulation{angles32: true}
	if p.Products != nil {
		em.rnd.Operand = p.Products.Round32
	}
	if p.Storage != nil {
		em.rnd.Result = p.Storage.Round32
	}
	return em
}

// emulate runs the emulation em of profile p on c: the case's inputs,
// parameters and upstream gradient rounded to p's storage format, if it
// has one, and so is every array written.
func emulate(c *format.Case, p format.Profile, em emulation) (map[string]*format.Array, error) {
	run := c
	if cl := em.layer; p.Storage != nil && cl != nil && cl.src == c {
		run = cl.run // every member rounds the same inputs the same way
	} else if p.Storage != nil {
		run = &format.Case{Manifest: c.Manifest, Arrays: maps.Clone(c.Arrays)}
		for _, info := range c.Manifest.Arrays {
			a := c.Arrays[info.Name]
			if info.Role == format.RoleExpected || a.F == nil {
				continue
			}
			r := &format.Array{Shape: a.Shape, F: slices.Clone(a.F), DType: a.DType}
			p.Storage.RoundAll(r.F)
			run.Arrays[info.Name] = r
		}
		if em.layer != nil {
			em.layer.src, em.layer.run = c, run
		}
	}
	got, err := candidate(run, em)
	if err != nil {
		return nil, fmt.Errorf("precision %s: %w", p.Name, err)
	}
	if p.Storage != nil {
		for _, a := range got {
			p.Storage.RoundAll(a.F)
		}
	}
	return got, nil
}
