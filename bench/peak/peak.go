// Package peak measures this core's float64 peak for the instruction mix
// ref's product kernels issue (docs/performance.md, "ref at production
// shapes"): rounded multiplies and rounded adds, never fused, on
// independent chains, so that the pipes, not latencies, bound the rate.
// Its benchmarks report the flop rate each path's instructions reach:
// AVX-512 (8 lanes), AVX2 (4 lanes) and the scalar SSE2 instructions the
// Go kernel compiles to.
package peak
