package mod_test

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/modref/modref/autograd"
	"github.com/modref/modref/mod"
	"github.com/modref/modref/nn"
	"github.com/modref/modref/spec"
)

// A four-layer MoD language model routing every other layer at capacity
// 12.5% (the paper's setting), one AdamW training step, and what the first
// routed layer reports.
func Example() {
	routing := spec.DefaultConfig(spec.DefaultBlockConfig(16, 2, 64), 0.125)
	cfg, err := spec.NewModelConfig(32, 0, 4, routing, spec.Pattern{Kind: spec.PatternEveryOther}, nil)
	if err != nil {
		panic(err)
	}
	m, err := mod.NewModel(cfg, 1)
	if err != nil {
		panic(err)
	}
	opt, err := nn.NewAdamW(mod.Tensors(m.Params()), nn.DefaultAdamW())
	if err != nil {
		panic(err)
	}
	tokens := [][]int{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}}
	targets := [][]int{append(tokens[0][1:], -1), append(tokens[1][1:], -1)}

	var tp autograd.Tape
	res, err := m.Forward(&tp, mod.ModelInputs{Tokens: tokens, Targets: targets})
	if err != nil {
		panic(err)
	}
	tp.Backward(res.Loss)
	opt.Step()

	l0 := res.Layers[0]
	fmt.Printf("layer 0: %d routed, %d skipped, compute fraction %.3f\n", l0.Routed, l0.Skipped, l0.ComputeFraction)
	fmt.Printf("selected positions per row: %d and %d\n", len(l0.Selected[0]), len(l0.Selected[1]))
	fmt.Printf("model FLOPs / dense model: %.3f\n", res.FLOPs.Ratio)
	// Output:
	// layer 0: 4 routed, 28 skipped, compute fraction 0.125
	// selected positions per row: 2 and 2
	// model FLOPs / dense model: 0.572
}

// One routed layer as in the paper (docs/spec.md §2 to §6): a linear router,
// capacity 25%, weights g = r. Each sequence of 8 tokens sends its 2 tokens
// with the largest router weight through the block; the others pass
// unchanged, and the router gets its gradient through g.
func ExampleLayer() {
	const batch, seqLen, d = 2, 8, 8
	rng := rand.New(rand.NewPCG(1, 2))
	layer, err := mod.NewLayer(spec.DefaultConfig(spec.DefaultBlockConfig(d, 2, 32), 0.25), rng)
	if err != nil {
		panic(err)
	}
	xs := make([]float32, batch*seqLen*d)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	x := autograd.New(batch*seqLen, d, xs) // sequence after sequence: row b·S+i is token i of sequence b

	var tp autograd.Tape
	res, err := layer.Forward(&tp, mod.LayerInputs{X: x, Batch: batch, SeqLen: seqLen})
	if err != nil {
		panic(err)
	}
	tp.Backward(tp.SumAll(res.Out))

	fmt.Println("selected positions:", res.Selected)
	fmt.Printf("routed %d, skipped %d, FLOPs %d of the dense block's %d\n",
		res.Routed, res.Skipped, res.FLOPs.Total, res.FLOPs.DenseTwin)
	unchanged := 0
	for i := range batch * seqLen {
		if slices.Equal(res.Out.Row(i), x.Row(i)) {
			unchanged++
		}
	}
	fmt.Println("rows equal to their input:", unchanged)
	for _, p := range layer.Params("") {
		if p.Name == "Router" {
			fmt.Println("router gradient nonzero:", slices.ContainsFunc(p.T.Grad, func(g float32) bool { return g != 0 }))
		}
	}
	// Output:
	// selected positions: [[3 6] [2 5]]
	// routed 4, skipped 12, FLOPs 6656 of the dense block's 28672
	// rows equal to their input: 12
	// router gradient nonzero: true
}
