package autograd

import "fmt"

// Sum returns the sums along an axis: axis 0 sums over rows and gives a
// 1×Cols tensor, axis 1 sums over columns and gives a Rows×1 tensor.
func (tp *Tape) Sum(a *Tensor, axis int) *Tensor { return tp.reduce("Sum", a, axis, 1) }

// Mean returns the means along an axis, shaped as Sum's result.
func (tp *Tape) Mean(a *Tensor, axis int) *Tensor {
	n := a.Rows
	if axis == 1 {
		n = a.Cols
	}
	return tp.reduce("Mean", a, axis, 1/float64(n))
}

// SumAll returns the sum of all elements as a 1×1 tensor.
func (tp *Tape) SumAll(a *Tensor) *Tensor { return tp.reduce("SumAll", a, -1, 1) }

// MeanAll returns the mean of all elements as a 1×1 tensor.
func (tp *Tape) MeanAll(a *Tensor) *Tensor {
	return tp.reduce("MeanAll", a, -1, 1/float64(a.Len()))
}

// reduce sums a along axis 0 or 1, or over everything for axis -1, in
// float64 and in index order, and multiplies by scale.
func (tp *Tape) reduce(name string, a *Tensor, axis int, scale float64) *Tensor {
	rows, cols := 1, 1
	switch axis {
	case 0:
		cols = a.Cols
	case 1:
		rows = a.Rows
	case -1:
	default:
		panic(fmt.Sprintf("autograd.%s: axis %d of %s: want 0 or 1", name, axis, a.shape()))
	}
	if a.Len() == 0 {
		panic(fmt.Sprintf("autograd.%s: empty tensor %s", name, a.shape()))
	}
	out := tp.alloc(rows, cols, needsGrad(a))
	if tp.sums32() {
		tp.reduce32(out, a, axis, scale)
	} else {
		acc := tp.f64(out.Len())
		for i := 0; i < a.Rows; i++ {
			for j, v := range a.Data[i*a.Cols : (i+1)*a.Cols] {
				acc[reduceIndex(axis, i, j)] += float64(v)
			}
		}
		for k, v := range acc {
			out.Data[k] = float32(v * scale)
		}
	}
	if out.Grad != nil {
		nd := tp.push(opReduce, out, a, nil)
		nd.arg, nd.scale = axis, float32(scale)
	}
	return tp.store(out)
}

// reduce32 is reduce's sum in float32 (Rounding.Stats): each output
// element the pairwise sum of its terms, times scale in float32.
func (tp *Tape) reduce32(out, a *Tensor, axis int, scale float64) {
	for k := range out.Data {
		var terms []float32
		switch axis {
		case 1:
			terms = a.Data[k*a.Cols : (k+1)*a.Cols]
		case -1:
			terms = a.Data
		default:
			terms = tp.f32(a.Rows)
			for i := range terms {
				terms[i] = a.Data[i*a.Cols+k]
			}
		}
		out.Data[k] = pairwise32(terms) * float32(scale)
	}
}

// reduceIndex returns where element (i, j) lands in a reduction along axis.
func reduceIndex(axis, i, j int) int {
	switch axis {
	case 0:
		return j
	case 1:
		return i
	}
	return 0
}

func (tp *Tape) backwardReduce(nd *node) {
	a, g := nd.a, nd.out.Grad
	if a.Grad == nil {
		return
	}
	for i := 0; i < a.Rows; i++ {
		row := a.Grad[i*a.Cols : (i+1)*a.Cols]
		for j := range row {
			row[j] += float32(nd.scale * g[reduceIndex(nd.arg, i, j)])
		}
	}
}
