#!/usr/bin/env bash
# Per-core matrix-kernel comparison for docs/performance.md: modref's kernel
# paths and vek (TestPerCore in autograd/internal/kernel) beside torch.matmul
# on OpenBLAS as installed and with OPENBLAS_CORETYPE=SkylakeX
# (bench/torch_matmul.py --percore), 1 thread each, run one after another in
# each of ROUNDS rounds (default 3) so that changing load on a shared machine
# falls on all of them. Each figure is GFLOP per CPU-second of a variant's
# fastest call over all rounds; prints a markdown table. With BASE set to a
# commit, TestPerCore as of that commit runs too, in every round beside the
# others, and its paths appear as base-avx512 and base-avx2 (before/after
# figures measured under the same load).
#   [BASE=commit] bench/matmul_percore.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/kernel.test" ./autograd/internal/kernel
if [ -n "${BASE:-}" ]; then
  mkdir "$tmp/base"
  git archive "$BASE" | tar -x -C "$tmp/base"
  (cd "$tmp/base" && go test -c -o "$tmp/base.test" ./autograd/internal/kernel)
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for r in $(seq "$rounds"); do
  echo "round $r: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$tmp/kernel.test" -test.run PerCore -test.v -percore | grep -o 'percore .*' >>"$tmp/out"
  if [ -n "${BASE:-}" ]; then
    "$tmp/base.test" -test.run PerCore -test.v -percore | grep -o 'percore modref-[a-z0-9]* .*' |
      sed 's/^percore modref-/percore base-/' >>"$tmp/out"
  fi
  /usr/bin/python3 bench/torch_matmul.py --percore >>"$tmp/out"
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_matmul.py --percore >>"$tmp/out"
done
echo "end: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
awk '
  { k = $4 " " $3; v = $2 SUBSEP k; if (!(v in best) || $5 > best[v]) best[v] = $5; rows[k] = 1 }
  END {
    n = split("vek modref-avx512 modref-avx2 modref-go torch-default torch-SkylakeX" extra, impl, " ")
    for (k in rows) {
      split(k, f, " "); line = "| " f[1] " | " f[2] " |"
      for (i = 1; i <= n; i++) { v = impl[i] SUBSEP k; line = line " " ((v in best) ? best[v] : "") " |" }
      print line
    }
  }' extra="${BASE:+ base-avx512 base-avx2}" "$tmp/out" | sort -t'|' -k2,2n -k3,3 >"$tmp/table"
printf '| m×k×n | op | vek | modref-avx512 | modref-avx2 | modref-go | torch-default | torch-SkylakeX |%s\n' "${BASE:+ base-avx512 | base-avx2 |}"
printf '| --- | --- | --- | --- | --- | --- | --- | --- |%s\n' "${BASE:+ --- | --- |}"
cat "$tmp/table"
