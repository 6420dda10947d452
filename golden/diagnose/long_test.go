package diagnose

import "flag"

// long runs the measurements that take minutes of CPU: the finite
// differences of every deviation's backward pass on every corpus case
// (diagnose_grad_fd_test.go). The README's `go test ./...` leaves them out
// so that it passes on a 2-core machine within minutes (issue 36); .ci/run
// sets -long and runs them.
var long = flag.Bool("long", false, "run the finite-difference sweeps over the corpus (minutes of CPU; .ci/run sets it)")
