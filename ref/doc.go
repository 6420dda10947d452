// Package ref is the float64 reference of every equation in ../shared/SPEC.md
// (Mixture-of-Depths, Raposo et al. 2024, arXiv 2404.02258): the ground truth
// that the float32 autograd implementation, the golden corpus and the oracle
// are checked against.
//
// Each equation is stated once, with plain loops that can be read against the
// paper line by line. The package imports neither autograd/, nn/ nor mod/.
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
// Top-k selection is discontinuous, so gradients are central finite
// differences with the routing decision held fixed. Every forward that
// computes a selection has a twin that takes a frozen one (LayerForwardFrozen,
// ModelForwardFrozen); the Frozen values also carry the stop-gradient
// constants sg(.) of SPEC.md sections 7 and 8, so that the finite-difference
// derivative of a frozen forward equals what an autograd implementation must
// return.
package ref
