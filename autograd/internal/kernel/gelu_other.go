//go:build !amd64

package kernel

// geluForwardAsm returns 0: there is no assembly off amd64.
func geluForwardAsm(pt *path, y, x []float32) int { return 0 }

// geluBackwardAsm returns 0: there is no assembly off amd64.
func geluBackwardAsm(pt *path, dx, g, x []float32) int { return 0 }
