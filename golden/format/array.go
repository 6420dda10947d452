package format

import (
	"fmt"
	"math"
)

// Array is one named array of a case or a candidate: a shape and row-major
// values, either floating point (F) or integer (I). The dtype it was stored
// with is kept so that messages can name it.
type Array struct {
	Shape []int
	// F holds the values of a float32 or float64 array, widened to float64.
	F []float64
	// I holds the values of an int32 or int64 array, widened to int64.
	I []int64
	// DType is the NumPy dtype string it was read with or is to be written
	// with: "<f8", "<f4", "<i8" or "<i4".
	DType string
}

// Float returns a float64 array of the given shape holding v (kept).
func Float(v []float64, shape ...int) *Array {
	if Elements(shape) != len(v) {
		panic(fmt.Sprintf("golden.Float: shape %v holds %d values, have %d", shape, Elements(shape), len(v)))
	}
	return &Array{Shape: shape, F: v, DType: "<f8"}
}

// Int returns an int64 array of the given shape holding v (kept).
func Int(v []int64, shape ...int) *Array {
	if Elements(shape) != len(v) {
		panic(fmt.Sprintf("golden.Int: shape %v holds %d values, have %d", shape, Elements(shape), len(v)))
	}
	return &Array{Shape: shape, I: v, DType: "<i8"}
}

// Scalar returns a float64 array of shape [] holding v.
func Scalar(v float64) *Array { return &Array{Shape: []int{}, F: []float64{v}, DType: "<f8"} }

// IsInt reports whether the array holds integers.
func (a *Array) IsInt() bool { return a.I != nil || a.DType == "<i8" || a.DType == "<i4" }

// Len returns the number of elements.
func (a *Array) Len() int { return Elements(a.Shape) }

// Elements returns the number of elements of a shape; [] is a scalar.
func Elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Index returns the multi-index of flat element k, such as [1 3 0], for
// messages.
func (a *Array) Index(k int) []int {
	idx := make([]int, len(a.Shape))
	for d := len(a.Shape) - 1; d >= 0; d-- {
		if a.Shape[d] > 0 {
			idx[d] = k % a.Shape[d]
			k /= a.Shape[d]
		}
	}
	return idx
}

// FirstNonFinite returns the flat index of the first NaN or infinite value,
// or -1.
func (a *Array) FirstNonFinite() int {
	for k, v := range a.F {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return k
		}
	}
	return -1
}
