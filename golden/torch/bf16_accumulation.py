"""Measure how this machine's PyTorch accumulates bf16 matrix products on the CPU.

Usage: /usr/bin/python3 golden/torch/bf16_accumulation.py [--no-onednn]

For products of random bf16 operands (m x k by k x n, each operand contiguous or a
transposed view) it prints which order of accumulation PyTorch's result equals bit for
bit: "bf16" (s = bf16(s + bf16(a*b)) in the order of k, from s = 0, each step computed
in float32 first: the fallback kernel's c += a*b in bf16) or "float32" (the exact product
rounded once to bf16, which a float32 accumulation gives but where a float32 partial sum
rounds first: then "neither", with an error of float32 accumulation's size), and
the error of PyTorch's result relative to the product's largest element, beside the
float32 one's. Then the same for torch.autocast("cpu", dtype=torch.bfloat16) on float32
tensors. --no-onednn turns oneDNN off (torch.backends.mkldnn.flags(enabled=False)), the
path of a CPU without AVX-512. docs/tolerances.md ("Products accumulated in bf16")
records what it printed with Debian's PyTorch 1.13; mod/modcase's cpuAccumulatesInBF16
emulates it. Deterministic (seed 0).
"""

import sys

import torch

BF = torch.bfloat16
SHAPES = [(1, 256, 1), (16, 256, 1), (150, 8, 1), (1, 150, 8), (1, 384, 6), (16, 16, 16),
          (17, 16, 16), (1, 16, 300), (50, 256, 1), (64, 64, 64)]


def in_bf16(a, b):
    """a @ b accumulated in bf16 in the order of k, as float64 values."""
    s = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for l in range(a.shape[1]):
        term = (a[:, l:l + 1].float() * b[l:l + 1, :].float()).to(BF).float()
        s = (s + term).to(BF).float()
    return s.double()


def layout(x, transposed):
    """x itself, or a transposed view of a contiguous copy of xT with x's values."""
    return x.t().contiguous().t() if transposed else x.contiguous()


def which(got, a, b):
    """The accumulation got equals bit for bit, and its error over the float32 one's."""
    exact = a.double() @ b.double()
    f32 = exact.to(BF).double()
    scale = exact.abs().max().item() or 1.0
    name = "bf16" if torch.equal(got, in_bf16(a, b)) else "float32" if torch.equal(got, f32) else "neither"
    return name, (got - exact).abs().max().item() / scale, (f32 - exact).abs().max().item() / scale


def main(argv):
    if argv not in ([], ["--no-onednn"]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    torch.manual_seed(0)
    print("torch", torch.__version__, "oneDNN", "off" if argv else "on")
    with torch.backends.mkldnn.flags(enabled=not argv):
        for m, k, n in SHAPES:
            cells = []
            for ta, tb in ((0, 0), (1, 0), (0, 1)):
                a, b = torch.randn(m, k).to(BF), torch.randn(k, n).to(BF)
                got = (layout(a, ta) @ layout(b, tb)).double()
                cells.append("%s%s %s %.2g (float32 %.2g)" % ("aT" if ta else "a", "·bT" if tb else "·b", *which(got, a, b)))
            a, b = torch.randn(m, k).to(BF), torch.randn(k, n).to(BF)
            with torch.autocast("cpu", dtype=BF):
                got = (a.float() @ b.float()).double()
            cells.append("autocast %s %.2g (float32 %.2g)" % which(got, a, b))
            print("%3d x %3d x %3d (%6d): %s" % (m, k, n, m * k * n, "; ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
