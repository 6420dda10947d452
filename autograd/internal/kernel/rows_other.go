//go:build !amd64

package kernel

// maxAbsAsm returns 0, 0: there is no assembly off amd64.
func maxAbsAsm(pt *path, x []float32) (uint32, int) { return 0, 0 }

// scaleShiftedAsm returns 0: there is no assembly off amd64.
func scaleShiftedAsm(pt *path, g, y []float32, s float64) int { return 0 }
