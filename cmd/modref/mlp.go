package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/modref/modref/autograd"
)

// runMLP trains logits = GELU(x·W1 + b1)·W2 + b2 with plain gradient descent
// to recover the labels of a fixed random teacher network, printing the
// cross-entropy as it falls.
func runMLP(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mlp", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: modref mlp [-steps N] [-seed S] [-lr LR]

Trains a tiny perceptron with the autograd engine to recover a random
teacher's labels, and prints its cross-entropy as it falls.

flags:
`)
		fs.PrintDefaults()
	}
	steps := fs.Int("steps", 300, "gradient steps")
	seed := fs.Uint64("seed", 1, "random seed for data and initialisation")
	lr := fs.Float64("lr", 0.5, "learning rate")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *steps < 1 {
		return fmt.Errorf("-steps must be at least 1, have %d", *steps)
	}
	if !(*lr > 0) || math.IsInf(*lr, 0) {
		return fmt.Errorf("-lr must be a positive number, have %v", *lr)
	}
	const n, in, hidden, classes = 256, 16, 32, 4
	rng := rand.New(rand.NewPCG(*seed, 0))
	normal := func(r, c int, scale float64) []float32 {
		d := make([]float32, r*c)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * scale)
		}
		return d
	}
	// The task: the argmax of a random linear teacher's scores.
	x := autograd.New(n, in, normal(n, in, 1))
	teacher := normal(in, classes, 1)
	y := make([]int, n)
	for i := range y {
		best := math.Inf(-1)
		for c := 0; c < classes; c++ {
			var s float64
			for k := 0; k < in; k++ {
				s += float64(float64(x.Data[i*in+k]) * float64(teacher[k*classes+c]))
			}
			if s > best {
				best, y[i] = s, c
			}
		}
	}
	w1 := autograd.NewParam(in, hidden, normal(in, hidden, 1/math.Sqrt(in)))
	b1 := autograd.NewParam(1, hidden, nil)
	w2 := autograd.NewParam(hidden, classes, normal(hidden, classes, 1/math.Sqrt(hidden)))
	b2 := autograd.NewParam(1, classes, nil)
	params := []*autograd.Tensor{w1, b1, w2, b2}

	var tp autograd.Tape
	for step := 1; step <= *steps; step++ {
		tp.Reset()
		for _, p := range params {
			p.ZeroGrad()
		}
		h := tp.GELU(tp.Add(tp.MatMul(x, w1), b1))
		loss := tp.CrossEntropy(tp.Add(tp.MatMul(h, w2), b2), y)
		tp.Backward(loss)
		for _, p := range params {
			for i, g := range p.Grad {
				p.Data[i] -= float32(*lr * float64(g))
			}
		}
		if step == 1 || step%50 == 0 || step == *steps {
			fmt.Fprintf(stdout, "step %4d  loss %.4f\n", step, loss.Data[0])
		}
	}
	return nil
}
