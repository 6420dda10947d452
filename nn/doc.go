// Package nn holds the transformer building blocks of modref, written on the
// autograd engine: Linear, Embedding, RMSNorm and LayerNorm, rotary position
// embeddings, causal multi-head attention over any ascending subset of a
// sequence, the GELU and SwiGLU MLPs, the pre-norm Block, a small language
// model, and AdamW. The equations are those of docs/spec.md §5.
//
// # Conventions
//
// Every tensor is an autograd.Tensor, a row-major matrix. Activations have
// one row per token: the tokens of a batch are stacked, sequence after
// sequence, so B sequences of S tokens are a (B·S)×d matrix. A weight is
// d_in×d_out and a linear map is y = x·W + b with the bias b a 1×d_out row.
//
// Positions are explicit. Where sequence structure matters (attention, the
// language model) a call takes pos [][]int: pos[b] lists, strictly
// ascending, the original positions in sequence b of that sequence's rows,
// and the input stacks the rows of sequence 0, then of sequence 1, and so
// on, so that it has Σ_b len(pos[b]) rows. A dense batch has pos[b] =
// 0, 1, …, S−1 (see Positions); a Mixture-of-Depths layer passes the
// positions of the tokens it selected, which may differ in number from row
// to row and have gaps. Sequences never attend to each other.
//
// # Defaults
//
//   - Norms: RMSNorm, y = x / sqrt(mean(x²) + ε) ⊙ γ with ε = 1e-6;
//     LayerNorm, y = (x − mean(x)) / sqrt(var(x) + ε) ⊙ γ + β with the
//     biased variance and ε = 1e-5. The block is pre-norm.
//   - Rotary embeddings: base 10000, the rotate-half pairing of GPT-NeoX and
//     Llama (see RoPE), applied per head to queries and keys at the tokens'
//     original positions.
//   - Attention: no biases on the projections, scores scaled by 1/sqrt(d_h),
//     causal by original position, no sliding window.
//   - MLP: W2·GELU(W1·x) with the erf form of GELU and no biases; SwiGLU,
//     W2·(SiLU(x·W1) ⊙ x·W3), as an option.
//   - The language model's head is untied from its embedding.
//
// # Initialisation
//
// Constructors draw from a *rand.Rand (math/rand/v2); NewLM seeds one as
// rand.New(rand.NewPCG(seed, 0)). Weight matrices and embedding tables are
// drawn from a normal distribution with mean 0 and standard deviation
// InitStd, in row-major order, one parameter after another in the order Params
// lists them; norm gains start at one, norm and linear biases at zero.
//
// # Work buffers
//
// Modules keep the work buffers they need between calls (position lists,
// rotary tables), so that a training step on a
// reused autograd.Tape allocates nothing after its first run. A module is
// therefore not safe for concurrent use, as a Tape is not.
//
// # Reproducibility
//
// Code in this package follows autograd's rule: every floating-point product
// that is then added is written float32(x*y) + z or float64(x*y) + z, so that
// no compiler may fuse it into a fused multiply-add.
//
// # Errors
//
// NewBlock, NewLM and NewAdamW take a configuration and return an error that
// names the field at fault. Constructors of single modules take sizes and
// panic on sizes that cannot work, as autograd.New does; shapes or positions
// that do not fit a forward pass are programmer errors and panic with the
// operation's name and the shapes.
package nn
