// Package autograd is a small reverse-mode automatic differentiation engine
// over float32, written to state the Mixture-of-Depths equations exactly and
// to run them fast enough to train small models on a CPU.
//
// # Tensors
//
// Every tensor is a row-major matrix: Rows×Cols values in Data, and, when the
// tensor takes part in differentiation, a gradient of the same shape in Grad.
// Vectors are 1×n or n×1 and scalars are 1×1. Rows are tokens: every matrix
// product keeps tokens on its row axis, so that a token's result never
// depends on how many other tokens share the batch.
//
// # The tape
//
// A Tape records each operation in an append-only slice as it runs the
// forward pass; Backward walks that slice in reverse and accumulates
// gradients. Nothing else decides the order of accumulation (no maps, no
// goroutines), so the gradients are the same bits run after run. A Tape can be
// Reset and reused: it keeps the tensors and buffers of the previous pass and
// hands them out again in the same order, so a training step that records the
// same operations allocates nothing after its first run. Tensors returned by
// a Tape's operations are therefore valid only until the next Reset.
//
// Parameters and inputs are made with NewParam and New and live outside any
// tape. Backward adds into their Grad; ZeroGrad clears it.
//
// # Broadcasting
//
// The binary operations Add, Sub and Mul take a full-shape left operand and a
// right operand that is either the same shape, a row vector (1×Cols, added to
// every row, as a bias is), a column vector (Rows×1, applied across each row,
// as a per-token scale is), or a 1×1 scalar.
//
// # Reproducibility
//
// The Go specification lets a compiler fuse x*y+z into one fused
// multiply-add (FMA) rounding, and the compilers for arm64, ppc64le, s390x and
// riscv64 do so, as does the amd64 compiler when GOAMD64=v3 or higher. Such
// fusion would change the bits a build produces. This package writes every
// product that is then added as an explicit conversion, float32(x*y)+z or
// float64(x*y)+z, which the specification says rounds the product and so
// forbids the fusion: the package's own arithmetic gives the same bits on
// every architecture. The matrix kernels (package autograd/internal/kernel)
// call vek's AVX2 code, which does use FMA instructions, on CPUs that have
// AVX2 and FMA, and plain Go elsewhere; bits are reproducible for a given
// kernel path, and the two paths agree to the tolerance documented in
// docs/tolerances.md; Rounding.Portable runs a tape's products on the Go
// loops on every machine, so that its results are the same bits everywhere.
// The standard library's math functions are the other limit: math.Exp and
// math.Log have assembly on some architectures (on amd64 Exp picks an FMA
// path at run time), and their pure-Go code may itself be fused, so their
// last bit can differ between architectures and builds. This package
// calls internal/elem's instead, which give the same bits everywhere.
//
// Transcendental functions (exp, log) are evaluated in float64 with
// internal/elem and rounded once to float32, with two exceptions
// chosen for speed: GELU's Φ is a float32 polynomial (gelu.go), and the
// exponentials of softmax, attention and cross-entropy are this package's
// own float64 exponential (internal/kernel/exp.go; relative error under
// 3e-10, pure Go, taken a row at a time by generated AVX-512 and AVX2 code
// that gives the same bits, so the same bits on every architecture and
// kernel path). Reductions other than the
// matrix products (softmax denominators, row sums, means, losses) accumulate
// in float64 in a fixed order.
//
// # Errors
//
// A shape that does not fit an operation is a programmer error: the
// operation panics with a message naming itself and the shapes involved.
package autograd
