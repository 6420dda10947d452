//go:build !pictures

package main

import "github.com/modref/modref/mod/train"

// picturesBuilt says whether this build of modref draws a training run's
// pictures. By default it does not: gonum.org/v1/plot and what it needs
// (fonts, LaTeX, PDF) would make a cold go install or go run ./cmd/modref
// check download four times the bytes and use a fifth more CPU
// (docs/performance.md, "A cold build of the oracle"). A build with
// -tags pictures draws them (pictures.go).
const picturesBuilt = false

// drawRun draws nothing in a build without pictures; train says so.
func drawRun(string, *train.Trainer) error { return nil }
