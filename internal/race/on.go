//go:build race

package race

// Enabled reports whether the race detector is on (go test -race).
const Enabled = true
