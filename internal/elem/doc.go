// Package elem holds the elementary functions of modref's float64 reference
// (ref) and of its float32 path (autograd, nn, mod):
// Exp, Log, Log1p, Pow, Sin, Cos and Erf, written so that every build of
// every architecture computes the same bits.
//
// The standard library's math functions do not: math.Exp and math.Log have
// assembly on some architectures (on amd64, Exp picks a fused multiply-add
// path at run time when the CPU has one), and the pure-Go ones are compiled
// with fused multiply-adds on arm64 and with GOAMD64=v3 or higher. The
// functions here are pure Go without assembly, and every product that is
// then added or subtracted is written float64(x*y) so that no compiler may
// fuse it (the FMA rule of docs/design.md, enforced by TestNoFusableProducts).
// Their operations are therefore each rounded as IEEE 754 prescribes, and the
// results are a function of the argument alone.
//
// Each function reduces its argument and evaluates a polynomial or rational
// approximation; where the coefficients come from fdlibm (Sun
// Microsystems, 1993), the function's comment says so. The maximum error
// measured against a 200-bit computation with math/big is given in
// docs/tolerances.md and enforced by the tests.
package elem
