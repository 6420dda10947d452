//go:build amd64

package peak

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// iterations is the loop count of one call: long enough that the call's
// cost is nothing beside it.
const iterations = 1 << 20

// benchPeak runs f, whose iterations each issue chains multiplies and
// chains adds of lanes float64 each, and reports the flop rate.
func benchPeak(b *testing.B, chains, lanes int, f func(int)) {
	for b.Loop() {
		f(iterations)
	}
	perIteration := float64(2 * chains * lanes)
	b.ReportMetric(float64(b.N)*iterations*perIteration/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(perIteration, "flop/iter")
}

// BenchmarkPeak measures the float64 flop rate of independent rounded
// multiplies and adds on one core for each path: go test ./bench/peak
// -bench . -cpu 1. Divided by the core's clock it is flop per cycle.
func BenchmarkPeak(b *testing.B) {
	b.Run("avx512", func(b *testing.B) {
		if !cpu.X86.HasAVX512F {
			b.Skip("this CPU has no AVX-512")
		}
		benchPeak(b, 8, 8, mulAdd512)
	})
	b.Run("avx2", func(b *testing.B) {
		if !cpu.X86.HasAVX2 {
			b.Skip("this CPU has no AVX2")
		}
		benchPeak(b, 7, 4, mulAdd256)
	})
	b.Run("scalar", func(b *testing.B) { benchPeak(b, 7, 1, mulAddScalar) })
}
