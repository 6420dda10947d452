//go:build !amd64

package kernel

// rowAsm returns nils: there is no generated exponential or division off
// amd64.
func rowAsm(*path) (expFunc, divFunc, int) { return nil, nil, 0 }
