"""Time a training step of a Mixture-of-Depths language model in PyTorch on CPU.

Usage: /usr/bin/python3 bench/torch_lm.py [--threads N] [--sizes small,medium,large] [--variants dense,...] [--steps N]

The PyTorch side of docs/performance.md's language-model table: the model
modref's mod/ benchmarks, written the way a PyTorch user would (float32,
batched top-k, gather and scatter_add, RoPE at the original positions,
causal attention among the selected tokens), so that the two are timed on the
same machine and thread count. Per size it prints the median wall time and
the median CPU time (of the process, every thread) of a forward and backward
pass of the loss (after 2 warm-up steps) for the dense
model, MoD on every other layer at capacity 12.5%, and MoD on all layers at
12.5% (or only the
variants named by --variants: dense, mod-every-other-12.5, mod-all-12.5).
The header line names the OpenBLAS kernel set that runs (openblas_get_corename).
bench/paired.py runs it pair by pair with modref's Go benchmark.
"""

import ctypes
import math
import sys
import time

import torch
import torch.nn.functional as F

SIZES = {
    # name: (d, heads, S, B, layers)
    "small": (64, 4, 64, 4, 4),
    "medium": (256, 8, 256, 8, 4),
    "large": (512, 8, 1024, 2, 4),
}
VOCAB = 256


def rms_norm(x, g, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope(x, pos, base=10000.0):
    # x: B x H x n x dh, pos: B x n (original positions); rotate-half pairing.
    dh = x.shape[-1]
    half = dh // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float32) / dh)
    ang = pos.to(torch.float32)[:, None, :, None] * inv
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.n2 = torch.nn.Parameter(torch.ones(d))
        self.wqkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, 4 * d, bias=False)
        self.w2 = torch.nn.Linear(4 * d, d, bias=False)

    def update(self, x, pos):
        """f(x) = Attn(N1 x) + MLP(N2 (x + Attn(N1 x))), without the outer residual."""
        B, n, d = x.shape
        q, k, v = self.wqkv(rms_norm(x, self.n1)).split(d, dim=-1)
        q, k, v = (t.view(B, n, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, pos), rope(k, pos)
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        mask = pos[:, None, :, None] < pos[:, None, None, :]
        s = s.masked_fill(mask, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, n, d)
        a = self.wo(a)
        h = x + a
        return a + self.w2(F.gelu(self.w1(rms_norm(h, self.n2))))


class Layer(torch.nn.Module):
    def __init__(self, d, heads, capacity):
        super().__init__()
        self.block = Block(d, heads)
        self.capacity = capacity
        self.router = torch.nn.Parameter(torch.randn(d) / math.sqrt(d)) if capacity < 1 else None

    def forward(self, x, pos):
        if self.router is None:
            return x + self.block.update(x, pos)
        B, S, d = x.shape
        k = max(1, int(math.floor(self.capacity * S + 1e-9)))
        r = x @ self.router                              # B x S
        idx = r.topk(k, dim=1).indices.sort(dim=1).values  # ascending positions
        xs = x.gather(1, idx[..., None].expand(B, k, d))
        f = self.block.update(xs, idx)
        g = r.gather(1, idx)[..., None]                  # raw weighting, g = r
        return x.scatter_add(1, idx[..., None].expand(B, k, d), g * f)


class LM(torch.nn.Module):
    def __init__(self, d, heads, layers, routed):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d)
        self.layers = torch.nn.ModuleList(Layer(d, heads, 0.125 if routed(l) else 1.0) for l in range(layers))
        self.norm = torch.nn.Parameter(torch.ones(d))
        self.head = torch.nn.Linear(d, VOCAB, bias=False)

    def forward(self, tokens, targets):
        B, S = tokens.shape
        pos = torch.arange(S)[None].expand(B, S)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, pos)
        return F.cross_entropy(self.head(rms_norm(x, self.norm)).reshape(B * S, VOCAB), targets.reshape(-1))


def time_step(model, tokens, targets, steps):
    """The median wall time and the median CPU time (the process's, every
    thread: time.process_time) of a forward and backward pass."""
    times, cpu = [], []
    for i in range(steps + 2):
        model.zero_grad(set_to_none=False)
        t0, c0 = time.perf_counter(), time.process_time()
        model(tokens, targets).backward()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i >= 2:  # warm-up
            times.append(dt)
            cpu.append(dc)
    return sorted(times)[len(times) // 2], sorted(cpu)[len(cpu) // 2]


VARIANTS = (("dense", lambda l: False), ("mod-every-other-12.5", lambda l: l % 2 == 0),
            ("mod-all-12.5", lambda l: True))


def cpu_capability():
    """The instruction set ATen's own kernels run ("AVX2", "AVX512", ...):
    on a CPU with AVX-512, PyTorch 1.13 picks AVX2 unless
    ATEN_CPU_CAPABILITY=avx512."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def openblas_core():
    """The kernel set of the OpenBLAS loaded into this process, or "none"."""
    with open("/proc/self/maps") as f:
        libs = sorted({l.split()[-1] for l in f if "libopenblas" in l})
    if not libs:
        return "none"
    lib = ctypes.CDLL(libs[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return "%s (%s)" % (lib.openblas_get_corename().decode(), libs[0])


def main(argv):
    threads, names, steps = 2, ["small", "medium", "large"], 5
    variants = [v for v, _ in VARIANTS]
    it = iter(argv)
    for a in it:
        if a == "--threads":
            threads = int(next(it))
        elif a == "--sizes":
            names = next(it).split(",")
        elif a == "--variants":
            variants = next(it).split(",")
        elif a == "--steps":
            steps = int(next(it))
        else:
            print(__doc__.strip().splitlines()[2], file=sys.stderr)
            return 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print("torch %s, %d threads, OpenBLAS core %s, ATen CPU capability %s" % (
        torch.__version__, torch.get_num_threads(), openblas_core(), cpu_capability()))
    for name in names:
        d, heads, S, B, L = SIZES[name]
        tokens = torch.randint(0, VOCAB, (B, S))
        targets = torch.randint(0, VOCAB, (B, S))
        for variant, routed in VARIANTS:
            if variant not in variants:
                continue
            model = LM(d, heads, L, routed)
            t, c = time_step(model, tokens, targets, steps)
            print("%-7s %-22s %10.2f ms/step %10.2f cpu-ms/step" % (name, variant, 1e3 * t, 1e3 * c))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
