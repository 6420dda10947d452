#!/usr/bin/env python3
"""Times torch.matmul on the shapes of the Go matmul benchmarks.

Prints GFLOP/s (2*m*k*n flops per product) for NN (a @ b), NT (a @ b.T, b
stored n x k) and TN (a.T @ b, a stored k x m) in float32 on 2 threads, the
same shapes as BenchmarkMatMul in autograd/internal/kernel, so the numbers can
stand beside it in docs/performance.md. Each figure is the median of 5
timings, each of as many products as fill about 0.2 s after a warm-up.

With --percore it measures instead the way TestPerCore in
autograd/internal/kernel does, which load on a shared machine disturbs
little: 1 thread, the NN, NT and TN calls interleaved, and each variant's
fastest call in process CPU time kept; it prints one line per variant,
"percore <impl> <op> <m>x<k>x<n> <GFLOP per CPU-second>", with impl
"torch-<OPENBLAS_CORETYPE or default>", for bench/matmul_percore.sh.

Needs Debian's PyTorch (apt-get install python3-torch python3-numpy
libopenblas0-pthread); run it with the system interpreter:
    /usr/bin/python3 bench/torch_matmul.py
"""
import os
import statistics
import sys
import time

import torch

SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512),
          (1024, 1024, 1024), (2048, 512, 512), (512, 2048, 512)]


def gflops(f, m, k, n):
    f()
    reps, t = 1, 0.0
    while True:  # find a repeat count filling about 0.2 s
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        t = time.perf_counter() - t0
        if t >= 0.05:
            break
        reps *= 2
    reps = max(1, int(reps * 0.2 / t))
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        runs.append((time.perf_counter() - t0) / reps)
    return 2.0 * m * k * n / statistics.median(runs) / 1e9


PERCORE_SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024)]


def percore():
    torch.set_num_threads(1)
    impl = "torch-" + os.environ.get("OPENBLAS_CORETYPE", "default")
    for m, k, n in PERCORE_SHAPES:
        a = torch.rand(m, k) * 2 - 1
        b = torch.rand(k, n) * 2 - 1
        bt = torch.rand(n, k) * 2 - 1
        at = torch.rand(k, m) * 2 - 1
        c = torch.empty(m, n)
        fs = {"NN": lambda: torch.matmul(a, b, out=c),
              "NT": lambda: torch.matmul(a, bt.t(), out=c),
              "TN": lambda: torch.matmul(at.t(), b, out=c)}
        flop = 2.0 * m * k * n
        best = {op: float("inf") for op in fs}
        for _ in range(max(5, int(3e9 / flop))):
            for op, f in fs.items():
                t0 = time.process_time()
                f()
                best[op] = min(best[op], time.process_time() - t0)
        for op, t in best.items():
            print(f"percore {impl} {op} {m}x{k}x{n} {flop / t / 1e9:.1f}")


def main():
    if "--percore" in sys.argv[1:]:
        percore()
        return
    torch.set_num_threads(2)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print("shape (m x k x n)   NN GFLOP/s   NT GFLOP/s   TN GFLOP/s")
    for m, k, n in SHAPES:
        a = torch.rand(m, k) * 2 - 1
        b = torch.rand(k, n) * 2 - 1
        bt = torch.rand(n, k) * 2 - 1  # NT: b stored n x k
        at = torch.rand(k, m) * 2 - 1  # TN: a stored k x m
        c = torch.empty(m, n)
        nn = gflops(lambda: torch.matmul(a, b, out=c), m, k, n)
        nt = gflops(lambda: torch.matmul(a, bt.t(), out=c), m, k, n)
        tn = gflops(lambda: torch.matmul(at.t(), b, out=c), m, k, n)
        print(f"{m}x{k}x{n:<12} {nn:10.1f} {nt:12.1f} {tn:12.1f}")


if __name__ == "__main__":
    main()
