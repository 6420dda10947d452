//go:build !amd64

package kernel

// available lists the paths this CPU can run: the Go loops only.
func available() []*path { return []*path{goPath} }

// availablePortable lists the paths with the Go loops' bits this CPU can
// run: the Go loops only.
func availablePortable() []*path { return []*path{goPath} }
