package diagnose

import (
	"strings"

	"github.com/modref/modref/golden/format"
)

// swapQKArrays computes a case's expected arrays under d, which swaps
// queries and keys (qk_swapped), by compute under d without the swap on
// the case with every block's Wq and Wk (and b_q and b_k) exchanged: an
// implementation that computes k_i·q_j with the case's parameters computes
// q_i·k_j with the exchanged ones, RoPE rotating both by their positions
// alike. The exchanged case's gradients of Wq are the implementation's of
// Wk, and the other way round, so they are exchanged back.
func swapQKArrays(c *format.Case, d *layerDeviation, compute func(*format.Case, *layerDeviation) (map[string]*format.Array, error)) (map[string]*format.Array, error) {
	plain := *d
	plain.swapQK = false
	plain.forward = nil // ref's forward of the case itself, not of the exchanged one
	arrays := make(map[string]*format.Array, len(c.Arrays))
	for name, a := range c.Arrays {
		if strings.HasPrefix(name, "param.") {
			name = swappedQK(name)
		}
		arrays[name] = a
	}
	out, err := compute(&format.Case{Manifest: c.Manifest, Arrays: arrays}, &plain)
	if err != nil {
		return nil, err
	}
	swapped := make(map[string]*format.Array, len(out))
	for name, a := range out {
		if strings.HasPrefix(name, "grad.param.") {
			name = swappedQK(name)
		}
		swapped[name] = a
	}
	return swapped, nil
}

// swappedQK is a parameter's name with Wq and Wk, and Bq and Bk,
// exchanged.
func swappedQK(name string) string {
	for _, p := range [][2]string{{"Wq", "Wk"}, {"Wk", "Wq"}, {"Bq", "Bk"}, {"Bk", "Bq"}} {
		if strings.HasSuffix(name, "."+p[0]) {
			return strings.TrimSuffix(name, p[0]) + p[1]
		}
	}
	return name
}
