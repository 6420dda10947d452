"""The PyTorch MoD implementation (mod_torch) as a candidate for `modref fuzz`.

Usage: /usr/bin/python3 golden/torch/fuzz_candidate.py [--dtype MODE] [--keep DIR]
           [--deviate NAME[+NAME...]] [--plant tiled_softmax] [MANIFEST OUT]

Without MANIFEST OUT it is a line-protocol server (modref_golden.serve,
docs/golden-format.md "Running a candidate"): modref fuzz --exec starts it
once and sends it one case per line, so torch is imported once. With them
it computes one case and writes OUT, the one-process-per-case form
(`--exec 'python3 fuzz_candidate.py {manifest} {out}'`).

--dtype MODE (default float64: exact to round-off, so any failure is a bug; float32 is
what a production implementation runs, judged by the corpus's float32 tolerances; every
mode of candidate.py: float32-native, bfloat16, bfloat16-pure, tf32, fp16) and --deviate
(also MODREF_DEVIATE) are candidate.py's: --deviate plants deviations of
docs/spec.md §11. --keep DIR (server only) also writes each case's manifest and
the candidate computed on it to DIR/NAME.json and DIR/NAME.npz, so that
measure_tol.py can judge the cases that passed for their error/tolerance
ratios. --plant tiled_softmax plants a bug of no list: attention
computed in key tiles of 64 with an online softmax that rescales the running
sum but not the running output when a later tile raises the row's maximum, as
a hand-written tiled kernel may; it shows only when a query attends over more
than 64 keys (more than 64 tokens routed in a row). Exit status: 0, or 2 on
bad usage or a bad case.
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import candidate as T  # noqa: E402
import mod_torch as M  # noqa: E402
import modref_golden as G  # noqa: E402  (check_corpus puts golden/python on the path)

TILE = 64
PLANTS = ("tiled_softmax",)


def tiled_attend(q, pos_q, k, v, pos_k, P, window=0):
    """mod_torch.attend with keys in tiles of TILE and the online-softmax bug
    described above; exactly attend when there is one tile."""
    n, H, dh = q.shape
    m = k.shape[0]
    if m <= TILE:
        return _attend(q, pos_q, k, v, pos_k, P, window)
    mask = pos_k[None, :] <= pos_q[:, None]               # n x m
    if window > 0:
        mask = mask & (pos_q[:, None] - pos_k[None, :] < window)
    low = torch.tensor(-1e30, dtype=q.dtype)
    mx = torch.full((H, n), -1e30, dtype=q.dtype)
    den = torch.zeros(H, n, dtype=q.dtype)
    acc = torch.zeros(H, n, dh, dtype=q.dtype)
    for j0 in range(0, m, TILE):
        j1 = min(m, j0 + TILE)
        mk = mask[None, :, j0:j1]
        s = torch.einsum("ihd,jhd->hij", q, k[j0:j1]) / math.sqrt(dh)
        s = torch.where(mk, s, low)
        new = torch.maximum(mx, s.max(dim=-1).values)
        p = torch.exp(s - new[..., None]) * mk
        den = den * torch.exp(mx - new) + p.sum(dim=-1)
        acc = acc + torch.einsum("hij,jhd->hid", p, v[j0:j1])  # the bug: acc is not rescaled by exp(mx - new)
        mx = new
    o = (acc / den[..., None]).permute(1, 0, 2).reshape(n, H * dh)
    return o @ P["Wo"]


_attend = M.attend


def main(argv):
    args, dtype, deviation, plant, keep = [], "float64", os.environ.get("MODREF_DEVIATE") or None, None, None
    it = iter(argv)
    for a in it:
        if a == "--dtype":
            dtype = next(it, "")
        elif a == "--deviate":
            deviation = next(it, "")
        elif a == "--plant":
            plant = next(it, "")
        elif a == "--keep":
            keep = next(it, "")
        else:
            args.append(a)
    if len(args) not in (0, 2) or dtype not in T.DTYPES or keep == "" or (keep and args) or plant not in (None,) + PLANTS or \
            (deviation is not None and not set(deviation.split("+")) <= set(M.DEVIATIONS)):
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    if plant == "tiled_softmax":
        M.attend = tiled_attend

    def compute(case):
        cand = T.candidate(case, dtype, deviation)
        if keep:
            base = os.path.join(keep, os.path.basename(case.name))
            with open(base + ".json", "w") as f:
                json.dump(case.manifest, f)
            G.write_candidate(case, base + ".npz", cand)
        return cand

    if not args:
        G.serve(compute)
        return 0
    # One case: candidate.py's own, with the plant in place.
    return T.main(args + ["--dtype", dtype] + (["--deviate", deviation] if deviation else []))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
