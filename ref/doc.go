// Package ref is the float64 reference of every equation in docs/spec.md
// (Mixture-of-Depths, Raposo et al. 2024, arXiv 2404.02258): the ground truth
// that the float32 autograd implementation, the golden corpus and the oracle
// are checked against.
//
// Each equation is stated once, with plain loops that can be read against the
// paper line by line. The package imports neither autograd/, nn/ nor mod/;
// its configuration types are package spec's (docs/design.md, "Dependencies").
//
// # Layout conventions
//
//   - A matrix is a *mat.Dense (gonum), row-major.
//   - A batch of activations is []*mat.Dense: one S×d matrix per batch row b.
//   - A per-token scalar field (router weights r, weights g, targets t,
//     predictor logits q, noise) is [][]float64 indexed [b][i], each row of
//     length S.
//   - A vector parameter (router w, norm gains, biases) is []float64. A scalar
//     parameter (router bias, the predictor's output bias) is a []float64 of
//     length 1, so that every parameter is a slice that finite differences can
//     perturb in place (see LayerParams.Tensors).
//   - Weights multiply row vectors from the right: y = x·W with W of shape
//     d_in×d_out, everywhere (projections, MLP, predictor, LM head).
//   - Padding is on the right: row b has V_b valid tokens at positions
//     0..V_b-1; a nil valid-length slice means every position is valid.
//
// # Routing decisions and gradients
//
// Top-k selection is discontinuous, so gradients are taken with the routing
// decision held fixed. Every forward that computes a selection has a twin
// that takes a frozen one (LayerForwardFrozen, ModelForwardFrozen,
// MoDEForwardFrozen); the Frozen values also carry the stop-gradient
// constants sg(.) of docs/spec.md §7 and §8, so that the derivative of a
// frozen forward equals what an autograd implementation must return.
// LayerGradients, ModelGradients and MoDEGradients compute it with
// hand-derived backward passes, each step beside the forward step it
// inverts; the tests hold them to the central finite differences of the
// frozen forwards (FDGradient) on drawn configurations. For a caller that
// computes a layer otherwise (golden's emulated deviations), the pieces are
// exported: BlockPass, the block over rows placed anywhere (RoPE at any
// positions, the window counted in others, or bidirectional) with its
// backward; LayerForwardKept and LayerBackward, the routing's side of the
// backward from the gradients of the output's parts (LayerPartGrads); and
// ModelGradientsThrough, a model whose routed layers the caller steps.
//
// LayerGradientMagnitudes, ModelGradientMagnitudes and
// MoDEGradientMagnitudes run the same backward passes with every factor
// squared and every difference a sum: each gradient element's
// root-sum-square of the terms that reach it, the scale of what cancelled
// where it is small by cancellation, from which golden's precision
// profiles take a floor (docs/tolerances.md).
//
// # Products
//
// Matrix products go through ref/internal/prod, whose every element has the
// bits of the plain loop s += float64(a*b) in order of the summed index, at
// any block size and GOMAXPROCS, on its generated AVX-512 and AVX2 paths
// (a rounded multiply, then a rounded add, per lane) as on its Go path. The block over a sequence (BlockUpdate,
// AttentionUpdate) is computed in matrix form beyond small sizes, with the
// bits of the token-by-token KVCache steps that decoding runs
// (TestBlockUpdateIsTheCacheLoop).
//
// # Reproducibility
//
// The Go specification lets a compiler fuse x*y + z into one fused
// multiply-add (FMA) rounding, even across statements. The arm64, ppc64le,
// s390x and riscv64 compilers do so, and so does the amd64 compiler with
// GOAMD64=v3 or higher (the default v1 does not). This package therefore
// writes every floating-point product that is then added or subtracted with an
// explicit conversion, s += float64(q[j]*kt[j]), which the specification says
// is rounded on its own and so forbids the fusion; a product that is stored or
// passed on and added later (an attention score, a term of AuxLoss, the
// argument of FloorRobust) is converted too. TestNoFusableProducts
// (internal/fmacheck) enforces the rule for products added in the same
// expression. The transcendental functions come from internal/elem (Exp,
// Log, Log1p, Pow, Sin, Cos, Erf), written under the same rule and without
// assembly, instead of the standard library's, whose assembly and fused
// pure-Go code differ in the last bit between builds, and normal draws come
// from the polar method on elem.Log rather than rand's NormFloat64, which
// calls math.Log and math.Exp. Of the math functions ref still calls, Sqrt
// is correctly rounded everywhere, and Abs, Floor, Max and Min are exact. So
// ref's results, and the float64 corpus generated from them, are the same
// bits on amd64 at every GOAMD64 level and on arm64.
package ref
