// Package kernel holds the dense float32 kernels the autograd engine spends
// its time in: the three matrix products a layer and its backward pass need.
//
// Every matrix is row-major. Each kernel overwrites its destination; callers
// that accumulate (gradients) add the result themselves. A row of the result
// depends only on the matching row of the left operand and the whole right
// operand, never on how many rows there are, so a token's result does not
// depend on the other tokens in a batch.
package kernel

import "fmt"

// MatMulNN sets c (m×n) to a (m×k) · b (k×n).
func MatMulNN(c, a, b []float32, m, k, n int) {
	check("MatMulNN", c, a, b, m, k, n)
	for i := 0; i < m; i++ {
		ci := c[i*n : (i+1)*n]
		clear(ci)
		for p := 0; p < k; p++ {
			aip := a[i*k+p]
			bp := b[p*n : (p+1)*n]
			for j := range ci {
				ci[j] += float32(aip * bp[j])
			}
		}
	}
}

// MatMulNT sets c (m×n) to a (m×k) · bᵀ, where b is n×k.
func MatMulNT(c, a, b []float32, m, k, n int) {
	check("MatMulNT", c, a, b, m, k, n)
	for i := 0; i < m; i++ {
		ai := a[i*k : (i+1)*k]
		for j := 0; j < n; j++ {
			bj := b[j*k : (j+1)*k]
			var s float32
			for p := range ai {
				s += float32(ai[p] * bj[p])
			}
			c[i*n+j] = s
		}
	}
}

// MatMulTN sets c (m×n) to aᵀ · b, where a is k×m and b is k×n.
func MatMulTN(c, a, b []float32, m, k, n int) {
	check("MatMulTN", c, a, b, m, k, n)
	clear(c[:m*n])
	for p := 0; p < k; p++ {
		bp := b[p*n : (p+1)*n]
		for i := 0; i < m; i++ {
			api := a[p*m+i]
			ci := c[i*n : (i+1)*n]
			for j := range ci {
				ci[j] += float32(api * bp[j])
			}
		}
	}
}

func check(op string, c, a, b []float32, m, k, n int) {
	if m < 0 || k < 0 || n < 0 || len(a) != m*k || len(b) != k*n || len(c) != m*n {
		panic(fmt.Sprintf("kernel.%s: m=%d k=%d n=%d needs len(a)=%d len(b)=%d len(c)=%d, have %d %d %d",
			op, m, k, n, m*k, k*n, m*n, len(a), len(b), len(c)))
	}
}
