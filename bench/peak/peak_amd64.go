package peak

// Each loop iteration issues as many multiplies as adds, each on its own
// register (a multiply by 1.0 and an add of 0.0, so the values stay as
// they are), n iterations in all: 8 of each on ZMM registers (32 of them),
// 7 on YMM and XMM (16: 14 chains and the two constants). Six chains of
// each cover a 3-cycle latency at two instructions a cycle.

//go:noescape
func mulAdd512(n int)

//go:noescape
func mulAdd256(n int)

//go:noescape
func mulAddScalar(n int)
