package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/modref/modref/golden"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/mod/modcase"
)

// BenchmarkCheckAtScale times `modref check` of the production-shaped
// example of docs/examples/llama3-layer-d512-s2048.json (B = 3, S = 2048,
// d = 512), generated without its catches into a temporary corpus first
// (seconds, outside the timing): against the case's own values as the
// candidate (candidate) and against modref's own float32 implementation
// (mod). Run it alone (-run '^$' -bench CheckAtScale -benchtime 1x);
// docs/performance.md ("gen and check at production shapes") records it.
func BenchmarkCheckAtScale(b *testing.B) {
	raw, err := os.ReadFile("../../docs/examples/llama3-layer-d512-s2048.json")
	if err != nil {
		b.Fatal(err)
	}
	g, err := golden.DecodeGenConfig(raw)
	if err != nil {
		b.Fatal(err)
	}
	c, err := golden.GenerateUnmeasured(g, modcase.Float32Tolerances)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := golden.WriteGenerated(dir, c); err != nil {
		b.Fatal(err)
	}
	cand := filepath.Join(b.TempDir(), "candidate.npz")
	if err := format.WriteNPZ(cand, c.Candidate()); err != nil {
		b.Fatal(err)
	}
	name := c.Manifest.Name
	c = nil
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"candidate", []string{"--corpus", dir, "--candidate", cand, name}},
		{"mod", []string{"--corpus", dir, name}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := runCheck(bc.args, io.Discard, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
