#!/usr/bin/env bash
# Per-core matrix-kernel comparison for docs/performance.md: modref's kernel
# paths and vek (TestPerCore in autograd/internal/kernel) beside torch.matmul
# on OpenBLAS as installed and with OPENBLAS_CORETYPE=SkylakeX
# (bench/torch_matmul.py --percore), 1 thread each, run one after another in
# each of ROUNDS rounds (default 3) so that changing load on a shared machine
# falls on all of them. Each figure is GFLOP per CPU-second of a variant's
# fastest call over all rounds; prints a markdown table.
#   bench/matmul_percore.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/kernel.test" ./autograd/internal/kernel
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for r in $(seq "$rounds"); do
  echo "round $r: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$tmp/kernel.test" -test.run PerCore -test.v -percore | grep -o 'percore .*' >>"$tmp/out"
  /usr/bin/python3 bench/torch_matmul.py --percore >>"$tmp/out"
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_matmul.py --percore >>"$tmp/out"
done
echo "end: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
awk '
  { k = $4 " " $3; v = $2 SUBSEP k; if (!(v in best) || $5 > best[v]) best[v] = $5; rows[k] = 1 }
  END {
    n = split("vek modref-avx512 modref-avx2 modref-go torch-default torch-SkylakeX", impl, " ")
    for (k in rows) {
      split(k, f, " "); line = "| " f[1] " | " f[2] " |"
      for (i = 1; i <= n; i++) { v = impl[i] SUBSEP k; line = line " " ((v in best) ? best[v] : "") " |" }
      print line
    }
  }' "$tmp/out" | sort -t'|' -k2,2n -k3,3 >"$tmp/table"
printf '| m×k×n | op | vek | modref-avx512 | modref-avx2 | modref-go | torch-default | torch-SkylakeX |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- |\n'
cat "$tmp/table"
