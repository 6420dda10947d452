package golden_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/modref/modref/golden/diagnose"
	"github.com/modref/modref/golden/format"
	"github.com/modref/modref/golden/judge"
)

// Load a case, write a candidate file as an implementation under test would,
// and judge it. The candidate here is what an implementation that counts the
// residual twice (docs/spec.md §11) computes for the case, so it fails, and
// Diagnose names the mistake.
func Example() {
	c, err := format.Load("corpus", "layer-paper")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (%s): %s\n", c.Manifest.Name, c.Manifest.Kind, c.Manifest.Loss)

	// An implementation writes its arrays under the candidate names:
	// "out", "selected", "grad.param.Wq", ...
	arrays, err := diagnose.DeviantCandidate(c, "residual_twice", "")
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "candidate")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "layer-paper.npz")
	if err := format.WriteNPZ(path, arrays); err != nil {
		panic(err)
	}

	// What modref check does with it.
	cand, err := format.ReadNPZ(path)
	if err != nil {
		panic(err)
	}
	res, err := judge.Compare(c, cand, false)
	if err != nil {
		panic(err) // bad input: a missing array, a wrong shape, NaN
	}
	// The extra term g·x does not depend on the block's parameters, so only
	// the output, the loss and the gradients of x and the router are wrong.
	fmt.Println("pass:", res.Pass)
	for _, a := range res.Arrays {
		if a.Status == judge.StatusFail {
			fmt.Printf("  %s outside its tolerance (rtol %g)\n", a.Name, a.Tolerance.RTol)
		}
	}

	// What modref diagnose does with it.
	results, err := diagnose.Diagnose(c, cand)
	if err != nil {
		panic(err)
	}
	for _, d := range results {
		if d.Match {
			fmt.Println("matches:", d.Name)
		}
	}
	// Output:
	// layer-paper (layer): sum(upstream.out * out) + aux.total
	// pass: false
	//   out outside its tolerance (rtol 1e-05)
	//   loss outside its tolerance (rtol 1e-05)
	//   grad.input.x outside its tolerance (rtol 0.0001)
	//   grad.param.Router outside its tolerance (rtol 0.0001)
	// matches: residual_twice
}
