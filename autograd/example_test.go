package autograd_test

import (
	"fmt"

	"github.com/modref/modref/autograd"
)

// The gradient of loss = Σ (x·w)² with respect to w, which is 2·xᵀ(x·w):
// record the forward pass on a tape, then run it backwards.
func Example() {
	x := autograd.New(2, 2, []float32{1, 2, 3, 4}) // a constant: no gradient
	w := autograd.NewParam(2, 1, []float32{1, -1}) // a parameter: Backward fills w.Grad
	var tp autograd.Tape
	y := tp.MatMul(x, w)
	loss := tp.SumAll(tp.Mul(y, y))
	tp.Backward(loss)
	fmt.Println("loss", loss.Data, "dloss/dw", w.Grad)
	// Output:
	// loss [2] dloss/dw [-8 -12]
}
