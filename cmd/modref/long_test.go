package main

import "flag"

// long runs the whole of the sweeps that the README's `go test ./...`
// samples, so that it passes on a 2-core machine within minutes (issue
// 36): TestHostileTrainCrashAtEveryStep's kill at every step of every file
// of a checkpoint save. .ci/run sets it.
var long = flag.Bool("long", false, "kill train at every step of every file of a save, not of the first file only (.ci/run sets it)")
