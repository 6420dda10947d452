#!/usr/bin/env bash
# Runs every fuzz target of ./fuzz for a short fixed time on top of its
# committed seed corpus (testdata/fuzz/<Name>/), one after the other, and
# fails if any target fails. Prints each target's last progress line
# (execs and execs/sec). .ci/run calls it; FUZZTIME overrides the time per
# target (default 5s), e.g. FUZZTIME=1h bash fuzz/run.sh on a bigger machine.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-5s}
targets=$(go test ./fuzz -list '^Fuzz' | grep '^Fuzz')
failed=()
for t in $targets; do
  log=$(mktemp)
  # Minimising a new interesting input defaults to 60 s, which would eat a
  # short run; 200 executions are enough to keep the cache small.
  if go test ./fuzz -run='^$' -fuzz="^${t}\$" -fuzztime="$fuzztime" -fuzzminimizetime=200x >"$log" 2>&1; then
    status=ok
  else
    status=FAIL
    failed+=("$t")
  fi
  # The last progress line: "fuzz: elapsed: 5s, execs: 12345 (2469/sec), ..."
  last=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1 || true)
  printf '%-24s %-4s %s\n' "$t" "$status" "${last#fuzz: }"
  if [ "$status" = FAIL ]; then
    cat "$log"
  fi
  rm -f "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]}"
  exit 1
fi
