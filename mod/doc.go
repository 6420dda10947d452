// Package mod is the fast float32 Mixture-of-Depths implementation of
// modref (Raposo et al. 2024, arXiv 2404.02258): a routed layer and a small
// language model on the autograd engine and the blocks of package nn, with
// every choice of docs/spec.md named in the configuration.
//
// # Configuration
//
// The configuration types are those of package spec (spec.Config,
// spec.BlockConfig, spec.Capacity, spec.Pattern, spec.ModelConfig), so that
// one vocabulary describes the float64 reference, the golden corpus and this
// package. mod imports neither ref nor golden (docs/design.md,
// "Dependencies"); every computation is done here, in float32. NewLayer, NewModel and NewDecoder
// return an error naming the field at fault for a configuration that cannot
// work; nothing panics later because of the configuration. A routed layer's
// capacity rule can be changed between steps with Layer.SetCapacity (for
// the annealing schedule AnnealedRatio), which checks it the same way.
//
// # Layout
//
// A batch of B sequences of S tokens is a (B·S)×d matrix, sequence after
// sequence (row b·S+i is token i of sequence b). Padding is on the right:
// sequence b has V_b valid tokens at positions 0..V_b−1 (LayerInputs.Valid,
// nil when every token is valid). Padded rows are never routed, never
// attended to, count in no loss and cost no FLOPs; a layer passes them
// through unchanged. Per-token inputs and outputs (router noise and jitter
// eps, router logits, weights, targets) are B·S values in the same order.
//
// # The routed layer (docs/spec.md §2 to §9)
//
// A routed layer computes the router weight r of every valid token
// (linear, linear_bias, l2norm or random, plus jitter), selects in each row
// the k_b tokens with the largest r (ties to the lower position, listed in
// ascending position) or, in causal routing, the tokens with r > 0 or q > 0,
// and then either gathers the selected tokens, runs the block over them as a
// sequence at their original positions and scatter-adds g·f back onto the
// residual stream (gather compute), or runs the block over every token and
// multiplies its update by the straight-through weight w = g + sg(m·g − g)
// (dense compute). With MLP-only routing, attention runs over every token
// and only the MLP is routed. With a sliding window w (spec.BlockConfig.Window,
// docs/spec.md §13) a token at position p attends only to the tokens of its
// block at original positions in (p − w, p]. A NaN router weight is an error naming its row
// and position.
//
// # Mixture-of-Depths-and-Experts (docs/spec.md §14)
//
// MoDE is a layer of its own (NewMoDE, spec.MoDEConfig): in the staged form
// an MoD router selects each row's top-k tokens, which pass attention and
// then a mixture of experts; in the integrated form attention is dense and
// the experts include no-op ones. Experts route by expert choice: each takes
// the k_e tokens of a row with the largest softmax gate for it, and a token
// gets gate·MLP_e from every expert that took it. MoDE.ForwardFrozen replays
// a decision (MoDEFrozen). MoDE has no decoder: expert choice looks at the
// whole row.
//
// # Results
//
// Every forward returns, per routed layer, what a user inspects: router
// logits, the selected positions of every row, targets, the auxiliary
// losses, predictor logits and accuracy, the numbers of tokens routed and
// skipped, the compute fraction, and the layer's forward FLOPs against its
// dense twin (counted with the conventions of ref's FLOPs functions).
// A layer's result also holds its decision with the stop-gradient constants
// that go with it (LayerResult.Frozen); Layer.ForwardFrozen replays such a
// decision, as ref.LayerForwardFrozen does, for finite differences and for
// the properties that hold only with the routing fixed.
//
// # Parameters
//
// Layer.Params and Model.Params name every parameter as ref and the golden
// corpus do ("Wq", "L1.Router", "Embed", ...). LoadParams fills them from
// float64 values; package mod/modcase builds a layer or a model with
// its inputs from a golden case or from ref's parameters.
//
// # Decoding
//
// A Decoder generates token by token in causal routing mode (docs/spec.md
// §9) with one key-value cache per layer that holds only the tokens routed
// through that layer, at their original positions; its logits equal those
// of the full-sequence causal forward.
//
// # Reproducibility
//
// Code in this package follows autograd's rule: every floating-point
// product that is then added is written float32(x*y) + z or float64(x*y) + z,
// so that no compiler may fuse it into a fused multiply-add.
package mod
