"""Time a training step and token-by-token decoding of mod/train's model in PyTorch on CPU.

Usage: /usr/bin/python3 bench/torch_train.py [--threads N] [--steps N]

The PyTorch side of the "Training and sampling" section of docs/performance.md:
the model of mod/train's benchmarks (BenchmarkTrainStep, BenchmarkSample) and of
docs/results.md, written the way a PyTorch user would, float32: byte vocabulary,
d = 64, 4 heads, 4 layers, d_ff = 256, RMSNorm, GELU, RoPE, untied head; dense,
and MoD on layers 1 and 3 at capacity 12.5 % (linear router, raw weighting,
gather compute) with the auxiliary predictor (SiLU MLP d -> d/2 -> 1 on the
detached residual stream, BCE against the top-k choice, weight 0.1).

Training step: 8 sequences of 64 random bytes, forward, backward, global-norm
clipping at 1, AdamW (lr 3e-3, betas 0.9/0.95, weight decay 0.1 on matrices).
Decoding: 128 greedy steps with a key-value cache per layer; the MoD model routes
each token by its predictor (q > 0) and caches only the routed tokens of a routed
layer. As in the Go benchmark, the predictor's output bias is set to -10 (every
routed layer skips every token) or +10 (routes every token). Prints the median
wall time and the median CPU time (of the process, every thread) over --steps
repetitions after 2 warm-up runs; docs/performance.md runs it pinned to one
core (taskset) with ATEN_CPU_CAPABILITY=avx512 where the CPU has AVX-512.
"""

import math
import sys
import time

import torch
import torch.nn.functional as F

from torch_lm import Block, cpu_capability, rms_norm, rope

VOCAB, D, HEADS, LAYERS, S, B, CAP = 256, 64, 4, 4, 64, 8, 0.125


class Predictor(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w1 = torch.nn.Linear(d, d // 2)
        self.w2 = torch.nn.Linear(d // 2, 1)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x))).squeeze(-1)


class Layer(torch.nn.Module):
    def __init__(self, routed):
        super().__init__()
        self.block = Block(D, HEADS)
        self.routed = routed
        if routed:
            self.router = torch.nn.Parameter(torch.randn(D) * 0.02)
            self.pred = Predictor(D)

    def forward(self, x, pos):
        if not self.routed:
            return x + self.block.update(x, pos), 0.0
        Bn, Sn, d = x.shape
        k = max(1, int(math.floor(CAP * Sn + 1e-9)))
        r = x @ self.router
        idx = r.topk(k, dim=1).indices.sort(dim=1).values
        xs = x.gather(1, idx[..., None].expand(Bn, k, d))
        f = self.block.update(xs, idx)
        g = r.gather(1, idx)[..., None]
        out = x.scatter_add(1, idx[..., None].expand(Bn, k, d), g * f)
        target = torch.zeros_like(r).scatter(1, idx, 1.0)
        aux = F.binary_cross_entropy_with_logits(self.pred(x.detach()), target)
        return out, 0.1 * aux

    def attend_step(self, x, pos, cache):
        """Attn(N1 x) for one token x (1 x d) at position pos, joining the cache."""
        blk = self.block
        q, k, v = blk.wqkv(rms_norm(x, blk.n1)).split(D, dim=-1)
        dh = D // HEADS
        q, k, v = (t.view(1, 1, HEADS, dh).transpose(1, 2) for t in (q, k, v))
        p = torch.tensor([[pos]])
        q, k = rope(q, p), rope(k, p)
        cache.append((k, v))
        ks = torch.cat([c[0] for c in cache], dim=2)
        vs = torch.cat([c[1] for c in cache], dim=2)
        s = (q @ ks.transpose(-1, -2)) / math.sqrt(dh)
        a = (s.softmax(-1) @ vs).transpose(1, 2).reshape(1, D)
        return blk.wo(a)

    def step(self, x, pos, cache):
        if self.routed:
            r = x @ self.router
            if self.pred(x).item() <= 0:
                return x
            g = r
        else:
            g = 1.0
        a = self.attend_step(x, pos, cache)
        h = x + a
        f = a + self.block.w2(F.gelu(self.block.w1(rms_norm(h, self.block.n2))))
        return x + g * f


class LM(torch.nn.Module):
    def __init__(self, mod):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.layers = torch.nn.ModuleList(Layer(mod and l % 2 == 1) for l in range(LAYERS))
        self.norm = torch.nn.Parameter(torch.ones(D))
        self.head = torch.nn.Linear(D, VOCAB, bias=False)

    def loss(self, tokens, targets):
        Bn, Sn = tokens.shape
        pos = torch.arange(Sn)[None].expand(Bn, Sn)
        x = self.embed(tokens)
        aux = 0.0
        for layer in self.layers:
            x, a = layer(x, pos)
            aux = aux + a
        logits = self.head(rms_norm(x, self.norm))
        return F.cross_entropy(logits.reshape(Bn * Sn, VOCAB), targets.reshape(-1)) + aux

    @torch.no_grad()
    def decode(self, first, n):
        caches = [[] for _ in self.layers]
        tok = first
        for pos in range(n):
            x = self.embed(torch.tensor([tok]))
            for layer, cache in zip(self.layers, caches):
                x = layer.step(x, pos, cache)
            tok = int(self.head(rms_norm(x, self.norm)).argmax())


def optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-3, betas=(0.9, 0.95), eps=1e-8)


def median_time(fn, reps):
    """The median wall time and the median CPU time (the process's, every
    thread: time.process_time) of fn after 2 warm-up runs."""
    times, cpu = [], []
    for i in range(reps + 2):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        if i >= 2:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return sorted(times)[len(times) // 2], sorted(cpu)[len(cpu) // 2]


def main(argv):
    threads, reps = 2, 10
    it = iter(argv)
    for a in it:
        if a == "--threads":
            threads = int(next(it))
        elif a == "--steps":
            reps = int(next(it))
        else:
            print(__doc__.strip().splitlines()[2], file=sys.stderr)
            return 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print("torch %s, %d threads, ATen CPU capability %s" % (torch.__version__, torch.get_num_threads(), cpu_capability()))
    tokens = torch.randint(0, VOCAB, (B, S))
    targets = torch.randint(0, VOCAB, (B, S))
    for name, mod in (("dense", False), ("mod-every-other-12.5", True)):
        model = LM(mod)
        opt = optimizer(model)

        def step():
            opt.zero_grad(set_to_none=False)
            model.loss(tokens, targets).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        t, c = median_time(step, reps)
        print("train step  %-26s %8.2f ms/step %9.0f tokens/s %8.2f cpu-ms/step %9.0f tokens/cpu-s" % (
            name, 1e3 * t, B * S / t, 1e3 * c, B * S / c))
        sys.stdout.flush()
    for name, mod, bias in (("dense", False, 0.0), ("mod-every-other-skip-all", True, -10.0),
                            ("mod-every-other-route-all", True, 10.0)):
        model = LM(mod)
        for layer in model.layers:
            if layer.routed:
                torch.nn.init.constant_(layer.pred.w2.bias, bias)
        t, c = median_time(lambda: model.decode(97, 128), reps)
        print("decode 128  %-26s %8.2f ms      %9.0f tokens/s %8.2f cpu-ms      %9.0f tokens/cpu-s" % (
            name, 1e3 * t, 128 / t, 1e3 * c, 128 / c))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
