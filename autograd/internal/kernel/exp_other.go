//go:build !amd64

package kernel

// rowAsm returns nil: there are no generated row kernels off amd64.
func rowAsm(*path) *rowKernels { return nil }
