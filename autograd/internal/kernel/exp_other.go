//go:build !amd64

package kernel

// expAsm returns nil: there is no generated exponential off amd64.
func expAsm(*path) (expFunc, int) { return nil, 0 }
