//go:build tools

// Package tools pins the programs the notebooks need: the GoNB Jupyter kernel
// and goimports, which GoNB runs on every cell. docs/notebooks/run.sh builds
// them from this module (go install module@version needs the proxy's version
// lists, which these machines cannot reach).
package tools

import (
	_ "github.com/janpfeifer/gonb"
	_ "golang.org/x/tools/cmd/goimports"
)
