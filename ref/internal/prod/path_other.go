//go:build !amd64

package prod

// paths holds the Go kernel alone on machines without generated code.
var paths = []*path{goPath}
