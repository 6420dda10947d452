"""A user's Mixture-of-Depths layer in PyTorch, written for modref's check.

Usage: python3 golden/python/example_layer.py CASE.json OUT.npz

It implements the paper's layer (docs/spec.md §2-§6: linear router, top-k at
a capacity ratio, RMSNorm, causal attention with rotate-half RoPE at the
original positions, GELU MLP, out = x + r·f on the selected tokens) in
float32, runs it on the case's inputs and parameters, backpropagates the
case's loss, and writes the candidate with modref_golden. Then:

    go run ./cmd/modref check --candidate OUT.npz CASE
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modref_golden as mg  # noqa: E402


def rms_norm(x, gain, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def rope(x, pos, base):
    """Rotate-half RoPE: coordinate j pairs with j + d_h/2; x is heads x n x d_h."""
    half = x.shape[-1] // 2
    freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    angle = (pos[:, None].double() * freq).to(x.dtype)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def block_update(x, pos, p, cfg):
    """f = Attn(N1(x)) + MLP(N2(x + Attn(N1(x)))) over one row's selected tokens."""
    n, d = x.shape
    heads, eps = cfg["heads"], cfg["norm_eps"]
    h = rms_norm(x, p["Norm1"], eps)
    q, k, v = ((h @ p[w]).view(n, heads, d // heads).transpose(0, 1) for w in ("Wq", "Wk", "Wv"))
    q, k = rope(q, pos, cfg["rope_base"]), rope(k, pos, cfg["rope_base"])
    scores = q @ k.transpose(1, 2) / (d // heads) ** 0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    a = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, d) @ p["Wo"]
    return a + F.gelu(rms_norm(x + a, p["Norm2"], eps) @ p["W1"]) @ p["W2"]


def mod_layer(x, p, cfg):
    B, S, d = x.shape
    r = x @ p["Router"]                                                  # router weights, B x S
    k = min(S, max(1, int(np.floor(cfg["capacity"]["ratio"] * S + 1e-9))))
    selected, rows, mult, routed = [], [], torch.zeros(B, S), torch.zeros(B, S)
    for b in range(B):
        top = torch.sort(-r[b].detach(), stable=True).indices[:k]       # ties: lower position
        idx = torch.sort(top).values                                     # ascending positions
        g = r[b, idx]                                                    # raw weighting, g = r
        rows.append(torch.zeros(S, d).index_add(0, idx, g[:, None] * block_update(x[b, idx], idx, p, cfg)))
        mult[b, idx], routed[b, idx] = g.detach(), 1.0
        selected.append(idx)
    return x + torch.stack(rows), r, torch.stack(selected), mult, routed


def main(case_path, out_path):
    case = mg.load_case(case_path)
    cfg = case.config["layer"]
    paper = dict(router="linear", jitter=0, weighting="raw", compute="gather", mlp_only=False, norm="rmsnorm",
                 mlp="gelu", positions="rope", aux="none", load_balance_weight=0, causal="off")
    if any(cfg[k] != v for k, v in paper.items()) or cfg["capacity"]["kind"] != "ratio" or \
            (case.inputs["valid"] != case.config["seq_len"]).any():
        sys.exit("%s: this example implements only the paper's layer without padding" % case.name)

    x = torch.tensor(case.inputs["x"], dtype=torch.float32, requires_grad=True)
    params = {n: torch.tensor(a, dtype=torch.float32, requires_grad=True) for n, a in case.params.items()}
    out, r, selected, mult, routed = mod_layer(x, params, cfg)
    aux_total = torch.tensor(0.0)                                        # no auxiliary loss in this case
    loss = (torch.tensor(case.upstream["out"], dtype=torch.float32) * out).sum() + aux_total
    loss.backward()

    mg.write_candidate(case, out_path, {
        "out": out, "router_logits": r, "selected": selected, "weights": r,
        "multipliers": mult, "targets": routed, "aux.total": aux_total, "loss": loss,
        "grad.input.x": x.grad, **{"grad.param." + n: t.grad for n, t in params.items()}})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    main(sys.argv[1], sys.argv[2])
