"""A float64 PyTorch implementation of Mixture-of-Depths, written from docs/spec.md.

This module is the independent cross-check of modref's golden corpus. It is
written from the contract of docs/spec.md (§2-§10, §13, §14) and docs/golden-format.md
only; it does not read or translate any Go code. Every choice that docs/spec.md
leaves open is listed in CHOICES below and in golden/torch/README.md.

Conventions (docs/golden-format.md):
- row vectors, y = x @ W with W of shape d_in x d_out;
- RoPE "rotate-half": coordinate j pairs with j + d_h/2, angle
  pos * base**(-2j/d_h), at each token's ORIGINAL position;
- padding on the right: row b has valid tokens 0..V_b-1.

Only the standard library, numpy and torch are used.
"""

import math

import torch

DTYPE = torch.float64

# NATIVE: LayerNorm and the cross-entropy by PyTorch's own functions
# (F.layer_norm, F.cross_entropy) instead of the formulas written out below, as
# an implementation written for production calls them (candidate.py's
# float32-native, bfloat16-pure and fp16 modes; the standardisation and the
# log-sum-exp then happen inside PyTorch's kernels, in their own order).
NATIVE = False

# Decisions docs/spec.md leaves open, made here from docs/spec.md / the paper.
CHOICES = {
    "capacity_floor_eps": "k = largest integer <= c*n + 1e-9 (ratio and log rules), clamp to [1, n]",
    "capacity_padding": "each capacity rule is applied to the row's valid length V_b in place of S "
                        "(integer: k_b = min(C, V_b)); k_b = 0 when V_b = 0",
    "jitter": "r = r_router + jitter * eps; the jittered r is used for selection, weights and aux losses",
    "mlp_only_router_input": "the router (and predictor) read the layer input x, not x' after attention",
    "swiglu": "MLP(x) = (silu(x W1) * (x W3)) W2",
    "layernorm": "(x - mean) / sqrt(biased var + eps) * gamma + beta",
    "load_balance_padding": "m and p are 0 at padded positions; F_s and P_s are means over all B rows",
    "dense_padding": "dense (straight-through) compute attends over the valid tokens of the row only",
    "causal_targets": "aux targets are the top-k selection under the layer's capacity, also in causal mode",
    "window": "a token at original position p attends to the tokens of its block's sequence "
              "(in a routed block the selected ones) at positions in (p - w, p] (docs/spec.md §13)",
    "mode_experts": "MoDE (docs/spec.md §14): expert choice, each expert (no-op ones included) takes "
                    "the k_e = clamp(floor(c_e*n + 1e-9), 1, n) tokens with the largest softmax gate "
                    "of N2(h) @ Gate, ties to the lower position; chosen experts add gate * MLP_e(N2(h))",
    "padded_outputs": "a layer passes a padded token through unchanged (out = x, docs/spec.md §6); "
                      "router logits, weights, targets, predictor logits and model logits are 0 there; "
                      "padded tokens never enter attention, selection or any loss",
}

# Conventions of the golden format on which the committed corpus and
# docs/golden-format.md have been seen to differ. The defaults follow the format
# doc (and docs/spec.md); check_corpus.py --convention KEY=VALUE selects the other
# reading, to show that a disagreement is exactly that one point.
CONVENTIONS = {
    # golden-format.md: expected.weights is g at every valid token (softmax: g is
    # defined on selected tokens only, 0 elsewhere). 'routed': g only where routed,
    # the format doc's first wording, kept to show the difference.
    "weights": "all",
    # docs/spec.md §8: t_i = 1 if token i was selected; read here as the top-k selection
    # under the capacity (the paper's Sec. 3.5 targets). 'routed': t = the causal decision.
    "causal_targets": "topk",
}

# A deliberate deviation of docs/spec.md §11, planted only by
# check_corpus.py --deviate NAME to verify that the cases whose manifest lists NAME
# in "catches" really fail under it. None in normal use.
DEVIATIONS = ("residual_twice", "residual_scaled", "unsorted_indices", "no_weighting",
              "ste_m_plus_1", "predictor_no_stopgrad", "predictor_block_output",
              "capacity_off_by_one", "decode_mismatch", "window_gathered_indices",
              "rope_gathered_indices", "targets_first_row", "weight_mlp_only", "gather_first_k",
              "capacity_floor_zero", "no_causal_mask", "mode_ungated_experts", "shared_router",
              "tanh_gate", "skipped_scaled", "aux_over_padding", "softmax_whole_row", "qk_swapped",
              "weight_scaled", "router_normed_input")
DEVIATION = None
# weight_scaled's constant α: every valid token's router weight is WEIGHT_SCALE * g
# (Mixture-of-Recursions' 0.1 * sigmoid(r) is 0.1 on sigmoid weighting).
WEIGHT_SCALE = 0.1


def deviates(name):
    """Whether deviation name is planted; DEVIATION may join several with '+'."""
    return DEVIATION is not None and name in DEVIATION.split("+")


# Bugs of this file's own making that no deviation of docs/spec.md §11 names,
# planted only by candidate.py --bug NAME, to see `modref diagnose` say where a
# candidate with each first departs from the oracle (docs/golden-format.md,
# "Where a candidate first departs"): "rope_interleaved",
# RoPE pairs coordinate 2j with 2j+1 in a rotate-half configuration (§5);
# "stale_selection", every routed layer of a model after the first routes the
# first one's selection again (its routing mask kept across layers); three of
# different kinds, to plant beside named deviations (docs/golden-format.md,
# "Named deviations and a remainder"): "router_detached", a detached tensor,
# the weight applied to the block's update is g.detach(), so the router
# learns from its auxiliary loss alone; "bce_sum", a changed formula, the
# auxiliary BCEs summed over the valid tokens instead of averaged;
# "targets_late", a wrong index, each target set one position after the
# token it marks (the last position's dropped).
BUGS = ("rope_interleaved", "stale_selection",
        "router_detached", "bce_sum", "targets_late")
BUG = None
_first_selection = None   # stale_selection: the first routed layer's (sel, topk)


# How a planted deviation is written, as ports write it (candidate.py --form):
# "torch_topk": the top-k indices come in the order torch.topk(..., sorted=False)
# returns them on this machine, not by descending weight (unsorted_indices runs the
# block in that order; gather_first_k argsorts them); "write_order": unsorted_indices
# writes `selected` in the order the block ran, not sorted.
PORT_FORMS = ("torch_topk", "write_order")
FORMS = ()


def topk_order(rv, idx):
    """The selected positions idx of a row (valid router weights rv) in the order
    top-k returns them: by descending weight, ties to the lower position, or as
    torch.topk(sorted=False) returns them under the form torch_topk."""
    if "torch_topk" in FORMS:
        got = torch.topk(rv, len(idx), sorted=False).indices.tolist()
        if sorted(got) == sorted(idx):
            return got
    return sorted(idx, key=lambda i: (-float(rv[i]), i))


# --------------------------------------------------------------------------
# Capacity (docs/spec.md §3)

def robust_floor(v):
    """The largest integer k with k <= v + 1e-9 (so 0.29*100 -> 29)."""
    return int(math.floor(v + 1e-9))


def capacity(cap, n):
    """Number of tokens to select among n valid tokens, for a capacity config dict."""
    if n <= 0:
        return 0
    kind = cap["kind"]
    if kind == "ratio":
        c = float(cap["ratio"])
        if not (0.0 < c <= 1.0):
            raise ValueError("capacity ratio %r outside (0, 1]" % c)
        k = robust_floor(c * n)
    elif kind == "integer":
        k = int(cap["tokens"])
        if k < 1:
            raise ValueError("integer capacity %d < 1" % k)
        k = min(k, n)
    elif kind == "log":
        c = float(cap["ratio"])
        smax = int(cap["max_len"])
        if n == 1:
            ratio = 1.0
        else:
            ratio = 1.0 - (math.log(n) / math.log(smax)) * (1.0 - c)
        k = robust_floor(n * ratio)
    else:
        raise ValueError("unknown capacity kind %r" % kind)
    return max(1, min(k, n))


def plain_capacity(cap, n):
    """The capacity_floor_zero deviation: k = int(c * n), neither float-robust nor
    clamped to 1 (integer capacities unchanged)."""
    if n <= 0:
        return 0
    if cap["kind"] == "ratio":
        return min(int(float(cap["ratio"]) * n), n)
    if cap["kind"] == "log" and n > 1:
        ratio = 1.0 - (math.log(n) / math.log(int(cap["max_len"]))) * (1.0 - float(cap["ratio"]))
        return min(int(n * ratio), n)
    return capacity(cap, n)


def annealed_ratio(c0, c1, step, warmup):
    """c(step) = c0 + (c1 - c0) * min(step / warmup, 1)."""
    if warmup <= 0:
        return c1
    return c0 + (c1 - c0) * min(step / warmup, 1.0)


# --------------------------------------------------------------------------
# Selection (docs/spec.md §4)

def topk_select(r_row, k, row=None):
    """Positions of the k largest values of the 1-D tensor r_row, ties to the
    lower position, returned in ascending position order (a Python list)."""
    vals = [float(v) for v in r_row]
    for i, v in enumerate(vals):
        if math.isnan(v):
            raise ValueError("NaN router weight at %sposition %d"
                             % ("" if row is None else "row %d, " % row, i))
    order = sorted(range(len(vals)), key=lambda i: (-vals[i], i))
    return sorted(order[:k])


def boundary_gap(r_row, k):
    """r_(k) - r_(k+1) of a row (None when there is no (k+1)-th value)."""
    vals = sorted((float(v) for v in r_row), reverse=True)
    if k < 1 or k >= len(vals):
        return None
    return vals[k - 1] - vals[k]


# --------------------------------------------------------------------------
# Building blocks

def rms_norm(x, gamma, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gamma


def layer_norm(x, gamma, beta, eps):
    if NATIVE:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    mu = x.mean(dim=-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * gamma + beta


def norm(x, P, which, cfg):
    """which is 'Norm1', 'Norm2' or 'FinalNorm'."""
    eps = float(cfg.get("norm_eps", 1e-6))
    kind = cfg.get("norm", "rmsnorm")
    if kind == "rmsnorm":
        return rms_norm(x, P[which], eps)
    if kind == "layernorm":
        return layer_norm(x, P[which], P[which + "Bias"], eps)
    raise ValueError("unknown norm %r" % kind)


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def rope(x, pos, base):
    """Rotate-half RoPE. x: n x H x d_h, pos: n (original positions)."""
    dh = x.shape[-1]
    half = dh // 2
    # In a 16-bit DTYPE (candidate.py's bfloat16-pure) the angles, their cosines and
    # sines are computed in float32 and rounded to DTYPE, as production code keeps its
    # rotary tables in float32: bf16 angles would be off by radians at position 2047.
    at = torch.float32 if DTYPE in (torch.bfloat16, torch.float16) else DTYPE
    j = torch.arange(half, dtype=at)
    inv = torch.pow(torch.tensor(float(base), dtype=at), -2.0 * j / dh)
    ang = pos.to(at)[:, None] * inv[None, :]          # n x half
    cos = torch.cos(ang).to(DTYPE)[:, None, :]
    sin = torch.sin(ang).to(DTYPE)[:, None, :]
    if BUG == "rope_interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def kv_heads(cfg):
    """The number of key and value heads (grouped-query attention, docs/spec.md §5):
    kv_heads, or heads when the config leaves it out."""
    return int(cfg.get("kv_heads", 0) or cfg["heads"])


def attention_qkv(h, pos, P, cfg):
    """Projections of normalised tokens h (n x d) at positions pos: q as n x H x d_h, k
    and v as n x KV x d_h (KV = kv_heads), with their biases under qkv_bias and RoPE
    applied to q and k when positions are rope."""
    n, d = h.shape
    H, KV = int(cfg["heads"]), kv_heads(cfg)
    dh = d // H
    q, k, v = h @ P["Wq"], h @ P["Wk"], h @ P["Wv"]
    if cfg.get("qkv_bias", False):   # Qwen's biases on q, k and v (docs/spec.md §5)
        q, k, v = q + P["Bq"], k + P["Bk"], v + P["Bv"]
    q, k, v = q.reshape(n, H, dh), k.reshape(n, KV, dh), v.reshape(n, KV, dh)
    if cfg.get("positions", "rope") == "rope":
        base = float(cfg.get("rope_base", 10000))
        q = rope(q, pos, base)
        k = rope(k, pos, base)
    if deviates("qk_swapped") and KV == H:   # q and k swapped after RoPE, in every block
        q, k = k, q
    return q, k, v


def attend(q, pos_q, k, v, pos_k, P, window=0):
    """Multi-head causal attention of queries q (n x H x dh) over keys k, v (m x KV x dh),
    query head h reading key and value head h // (H / KV) (grouped-query attention):
    query i sees key j iff pos_k[j] <= pos_q[i] and, with a window w > 0 (docs/spec.md
    §13), pos_q[i] - pos_k[j] < w (pos_* are the mask's positions). Returns n x d after
    Wo."""
    n, H, dh = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(dh)
    mask = pos_k[None, :] <= pos_q[:, None]               # n x m
    if window > 0:
        mask = mask & (pos_q[:, None] - pos_k[None, :] < window)
    scores = scores.masked_fill(~mask[None, :, :], float("-inf"))
    a = torch.softmax(scores, dim=-1)
    o = torch.einsum("hij,jhd->ihd", a, v).reshape(n, H * dh)
    return o @ P["Wo"]


def window_of(cfg):
    """The sliding attention window w of docs/spec.md §13; 0 is none."""
    return int(cfg.get("window", 0) or 0)


def attn_block(xs, pos, P, cfg, mask_pos=None):
    """Attn(N1(xs)) for a sequence xs (n x d) at original positions pos. The causal mask
    and the window follow pos too, unless mask_pos is given (only the unsorted_indices
    and window_gathered_indices deviations do)."""
    h = norm(xs, P, "Norm1", cfg)
    q, k, v = attention_qkv(h, pos, P, cfg)
    mp = pos if mask_pos is None else mask_pos
    return attend(q, mp, k, v, mp, P, window_of(cfg))


def mlp(h, P, cfg):
    kind = cfg.get("mlp", "gelu")
    if kind == "gelu":
        return gelu(h @ P["W1"]) @ P["W2"]
    if kind == "swiglu":
        return (silu(h @ P["W1"]) * (h @ P["W3"])) @ P["W2"]
    raise ValueError("unknown mlp %r" % kind)


def mlp_block(xs, P, cfg):
    """MLP(N2(xs))."""
    return mlp(norm(xs, P, "Norm2", cfg), P, cfg)


def block_update(xs, pos, P, cfg, mask_pos=None):
    """f(X~) = Y - X~ with H_ = X~ + Attn(N1(X~)), Y = H_ + MLP(N2(H_)) (docs/spec.md §5)."""
    a = attn_block(xs, pos, P, cfg, mask_pos)
    hh = xs + a
    y = hh + mlp_block(hh, P, cfg)
    return y - xs


# --------------------------------------------------------------------------
# Router, predictor, weights, aux losses

def router_logits(x, P, cfg, noise=None, jitter=None):
    """r (B x S) before masking. x: B x S x d."""
    kind = cfg.get("router", "linear")
    if deviates("router_normed_input") and kind in ("linear", "linear_bias"):   # gamma-MoD: router(N1(x))
        x = norm(x, P, "Norm1", cfg)
    if kind == "linear":
        r = x @ P["Router"]
    elif kind == "linear_bias":
        r = x @ P["Router"] + P["RouterBias"].reshape(())
    elif kind == "l2norm":
        # padded positions hold x = 0 in a model, where the derivative of the
        # square root is infinite: 0 there, reached without a NaN gradient
        ss = (x * x).sum(dim=-1)
        pos = ss > 0
        r = torch.where(pos, torch.sqrt(torch.where(pos, ss, torch.ones_like(ss))), torch.zeros_like(ss))
    elif kind == "random":
        if noise is None:
            raise ValueError("router 'random' needs the input.noise array")
        r = noise.clone()
    else:
        raise ValueError("unknown router %r" % kind)
    s = float(cfg.get("jitter", 0) or 0)
    if s != 0.0:
        if jitter is None:
            raise ValueError("jitter %g needs the input.jitter array" % s)
        r = r + s * jitter
    return r


def predictor_logits(x, P):
    """q = MLP_aux(sg(x)): Linear(d,h)+bias, SiLU, Linear(h,1)+bias. x: B x S x d."""
    xs = x if deviates("predictor_no_stopgrad") else x.detach()
    hid = silu(xs @ P["PredW1"] + P["PredB1"])
    return (hid @ P["PredW2"]).squeeze(-1) + P["PredB2"].reshape(())


def bce_with_logits(z, t):
    """Stable elementwise BCEWithLogits, max(z,0) - z t + log(1 + exp(-|z|)), with
    derivative sigmoid(z) - t everywhere. Written out, the formula's autograd
    derivative at z = 0 exactly is 1 - t or -t (the kinks of max and |z| taken
    one-sided) instead of 1/2 - t; torch's own function has the right one, and a
    router weight of exactly 0 (layer-causal-threshold) shows the difference."""
    return torch.nn.functional.binary_cross_entropy_with_logits(z, t, reduction="none")


def weights_of(r, m, valid_mask, kind):
    """g (B x S) from router logits r and the 0/1 selection mask m (float)."""
    if kind == "raw":
        return r
    if kind == "sigmoid":
        return torch.sigmoid(r)
    if kind == "none":
        return torch.ones_like(r)
    if kind == "softmax":
        # g_i = exp(r_i) / sum_{j selected in the row} exp(r_j); the row max is a
        # constant shift that cancels, used only for numerical range.
        big = torch.where(m > 0, r, torch.full_like(r, float("-inf")))
        shift = big.max(dim=-1, keepdim=True).values.detach()
        shift = torch.where(torch.isfinite(shift) & (shift > -1e299), shift, torch.zeros_like(shift))
        e = torch.exp(r - shift)
        den = (e * m).sum(dim=-1, keepdim=True)
        den = torch.where(den > 0, den, torch.ones_like(den))
        # 0 for the tokens not selected (docs/spec.md §6), so that dense
        # compute's straight-through weight g + sg(m g - g) gives them no
        # gradient either (found by modref fuzz: softmax with dense compute).
        return e * m / den
    raise ValueError("unknown weighting %r" % kind)


# --------------------------------------------------------------------------
# One routed layer (docs/spec.md §2-§9)

def valid_mask_of(valid, B, S):
    pos = torch.arange(S)[None, :]
    return (pos < torch.as_tensor(valid, dtype=torch.long)[:, None]).to(DTYPE)


def routed_layer(x, valid, P, cfg, noise=None, jitter=None):
    """Forward of one routed layer.

    x: B x S x d (float64 tensor, may require grad); valid: list of V_b;
    P: dict name -> tensor (unprefixed names); cfg: the manifest's layer object.
    Returns a dict of tensors / python values (see keys below).
    """
    B, S, d = x.shape
    vm = valid_mask_of(valid, B, S)                      # B x S
    r = router_logits(x, P, cfg, noise, jitter) * vm      # padded r are 0 (never used)
    has_pred = "PredW1" in P
    q = predictor_logits(x, P) * vm if has_pred else None

    # top-k selection under the capacity (also the aux targets)
    topk = []
    gaps = []
    for b in range(B):
        n = int(valid[b])
        k = capacity(cfg["capacity"], n)
        if deviates("capacity_floor_zero"):
            k = plain_capacity(cfg["capacity"], n)
        if deviates("capacity_off_by_one") and k > 0:
            # as astramind-ai/Mixture-of-depths writes it: r > the k-th largest r,
            # which drops the k-th token and every token tied with it
            rv = r[b, :n].detach()
            kth = float(torch.sort(rv, descending=True).values[k - 1])
            k = len([i for i in range(n) if float(rv[i]) > kth])
        topk.append(topk_select(r[b, :n].detach(), k, row=b))
        gaps.append(boundary_gap(r[b, :n].detach(), k))

    causal = cfg.get("causal", "off") or "off"
    if causal == "off":
        sel = topk
    elif causal in ("router", "predictor"):
        if cfg.get("weighting") == "softmax":
            raise ValueError("softmax weighting is not causal and is rejected in causal mode")
        z = r if causal == "router" else q
        if z is None:
            raise ValueError("causal 'predictor' needs predictor parameters")
        sel = [[i for i in range(int(valid[b])) if float(z[b, i]) > 0.0] for b in range(B)]
        # the decision's margin is the distance of the nearest logit to the threshold 0
        gaps = [float(z[b, :int(valid[b])].detach().abs().min()) if int(valid[b]) > 0 else None
                for b in range(B)]
    else:
        raise ValueError("unknown causal mode %r" % causal)

    global _first_selection
    if BUG == "stale_selection":
        if _first_selection is None:
            _first_selection = (sel, topk)
        else:
            sel, topk = _first_selection
    m = torch.zeros(B, S, dtype=DTYPE)
    for b in range(B):
        for i in sel[b]:
            m[b, i] = 1.0
    t = torch.zeros(B, S, dtype=DTYPE)
    tsel = sel if CONVENTIONS["causal_targets"] == "routed" else topk
    for b in range(B):
        for i in tsel[b]:
            t[b, i] = 1.0
    if BUG == "targets_late":   # each target one position after its token
        t = torch.cat([torch.zeros(B, 1, dtype=DTYPE), t[:, :-1]], dim=1) * vm
    if deviates("targets_first_row"):   # a flat B*S vector indexed by positions: row 0
        t = torch.zeros(B, S, dtype=DTYPE)
        for b in range(B):
            for i in tsel[b]:
                if i < int(valid[0]):
                    t[0, i] = 1.0

    g_router = weights_of(r, m, vm, cfg.get("weighting", "raw"))
    if deviates("tanh_gate"):   # p-MoD's TanhNorm: 0.2 * tanh(r) + 1 in place of the weighting
        g_router = (0.2 * torch.tanh(r) + 1) * vm
    if deviates("softmax_whole_row") and cfg.get("weighting", "raw") == "softmax":   # over every valid token
        g_router = weights_of(r, vm, vm, "softmax")
    if deviates("weight_scaled"):   # a constant scale on the weight, applied and reported
        g_router = WEIGHT_SCALE * g_router
    # no_weighting: g is computed (and reported as `weights`) but not applied.
    g = torch.ones_like(r) if deviates("no_weighting") else g_router
    if BUG == "router_detached":   # the router learns from its auxiliary loss alone
        g = g.detach()
    compute = cfg.get("compute", "gather")
    mlp_only = bool(cfg.get("mlp_only", False))

    rows = []
    mult_rows = {}   # gather_first_k: the factors it applies, at the positions it writes
    written = {}     # unsorted_indices written as run: each row's selected positions in that order
    for b in range(B):
        n = int(valid[b])
        xb = x[b]
        if compute == "gather":
            idx = sel[b]
            if mlp_only:
                pos = torch.arange(n)
                xp = xb[:n] + attn_block(xb[:n], pos, P, cfg)   # dense attention over valid tokens
                base = xp
                if idx:
                    it = torch.tensor(idx, dtype=torch.long)
                    fm = mlp_block(xp[it], P, cfg)
                    upd = g[b, it][:, None] * fm
                    if deviates("residual_twice"):
                        upd = g[b, it][:, None] * (xp[it] + fm)
                    elif deviates("residual_scaled"):
                        upd = g[b, it][:, None] * (xp[it] + fm) - xp[it]
                    base = xp.index_add(0, it, upd)
            else:
                base = xb[:n]
                if idx:
                    it = torch.tensor(idx, dtype=torch.long)
                    mask_pos = None
                    if deviates("unsorted_indices"):   # top-k's order, mask by that order
                        it = torch.tensor(topk_order(r[b, :n].detach(), idx), dtype=torch.long)
                        mask_pos = torch.arange(len(idx))
                        if "write_order" in FORMS:
                            written[b] = it.tolist()
                    if deviates("window_gathered_indices"):   # window counted in gathered indices
                        mask_pos = torch.arange(len(idx))
                    rope_pos = it
                    if deviates("rope_gathered_indices"):   # RoPE at 0..k-1, mask by position
                        rope_pos = torch.arange(len(idx))
                        mask_pos = it if mask_pos is None else mask_pos
                    gw = g[b, it]
                    if deviates("gather_first_k") and causal == "off":   # argsort(top-k indices) gathered as positions
                        score = topk_order(r[b, :n].detach(), idx)   # top-k's order
                        it = torch.tensor(sorted(range(len(idx)), key=lambda j: score[j]), dtype=torch.long)
                        rope_pos = torch.arange(len(idx)) if deviates("rope_gathered_indices") else it
                        mask_pos = torch.arange(len(idx))
                        gw = g[b, torch.tensor(idx, dtype=torch.long)]   # the t-th selected token's weight
                        mr = torch.zeros(S, dtype=DTYPE)
                        mr[it] = gw.detach()
                        mult_rows[b] = mr
                    if deviates("no_causal_mask"):   # every gathered token sees every other
                        mask_pos = torch.zeros(len(idx), dtype=torch.long)
                    if deviates("weight_mlp_only"):   # x + a + g*m: the weight on the MLP's update only
                        a = attn_block(xb[it], rope_pos, P, cfg, mask_pos)
                        upd = a + gw[:, None] * mlp_block(xb[it] + a, P, cfg)
                        if deviates("residual_twice"):   # the block's x + a + g*m added onto x
                            upd = xb[it] + upd
                    else:
                        f = block_update(xb[it], rope_pos, P, cfg, mask_pos=mask_pos)
                        upd = gw[:, None] * f
                        if deviates("residual_twice"):
                            upd = gw[:, None] * (xb[it] + f)
                        elif deviates("residual_scaled"):
                            upd = gw[:, None] * (xb[it] + f) - xb[it]
                    base = base.index_add(0, it, upd)
        elif compute == "dense":
            pos = torch.arange(n)
            w = g[b, :n] + (m[b, :n] * g[b, :n] - g[b, :n]).detach()
            if deviates("ste_m_plus_1"):
                w = g[b, :n] * m[b, :n] + (g[b, :n] - g[b, :n].detach())
            if mlp_only:
                res_in = xb[:n] + attn_block(xb[:n], pos, P, cfg)
                f = mlp_block(res_in, P, cfg)
            else:
                res_in = xb[:n]
                f = block_update(xb[:n], pos, P, cfg)
            base = res_in + w[:, None] * f
            if deviates("residual_twice"):
                base = res_in + w[:, None] * (res_in + f)
            elif deviates("residual_scaled"):
                base = res_in + w[:, None] * (res_in + f) - m[b, :n, None] * res_in
        else:
            raise ValueError("unknown compute %r" % compute)
        if deviates("skipped_scaled") and compute == "gather":   # p-MoD's STRing: a skipped token is g * x
            base = torch.where(m[b, :n, None] > 0, base, g[b, :n, None] * base)
        if n < S:
            base = torch.cat([base, xb[n:]], dim=0)
        rows.append(base)
    out = torch.stack(rows, dim=0)
    multipliers = (g * m).detach()
    for b, mr in mult_rows.items():
        multipliers[b] = mr
    if CONVENTIONS["weights"] == "routed":
        w_out = (g_router * m).detach()
    elif cfg.get("weighting", "raw") == "softmax" and not deviates("tanh_gate") and not deviates("softmax_whole_row"):     # softmax g is only defined on selected tokens
        w_out = (g_router * m).detach()
    else:
        w_out = (g_router * vm).detach()

    nvalid = vm.sum()
    aux = {}
    bce = (bce_with_logits(r, t) * vm).sum() / nvalid if nvalid > 0 else r.sum() * 0
    if BUG == "bce_sum":   # summed, not averaged
        bce = (bce_with_logits(r, t) * vm).sum()
    aux["router_bce"] = bce
    p = torch.sigmoid(r) * vm
    F = (m * vm).mean(dim=0)
    Pm = p.mean(dim=0)
    aux["load_balance"] = S * (F * Pm).sum()
    if has_pred and deviates("predictor_block_output") and causal == "off":
        q = predictor_logits(out, P) * vm
    if has_pred:
        # 0 with no valid token, as router_bce (found by modref fuzz: a batch of empty rows)
        aux["predictor_bce"] = (bce_with_logits(q, t) * vm).sum() / nvalid if nvalid > 0 else q.sum() * 0
        if BUG == "bce_sum":
            aux["predictor_bce"] = (bce_with_logits(q, t) * vm).sum()
    if deviates("aux_over_padding"):   # no padding mask in the losses: every position counts
        rf = router_logits(x, P, cfg, noise, jitter)
        aux["router_bce"] = bce_with_logits(rf, t).mean()
        aux["load_balance"] = S * (F * torch.sigmoid(rf).mean(dim=0)).sum()
        if has_pred:
            qf = predictor_logits(out if deviates("predictor_block_output") and causal == "off" else x, P)
            aux["predictor_bce"] = bce_with_logits(qf, t).mean()
    total = torch.zeros((), dtype=DTYPE)
    akind = cfg.get("aux", "none") or "none"
    aw = float(cfg.get("aux_weight", 0) or 0)
    if akind == "router_bce":
        total = total + aw * aux["router_bce"]
    elif akind == "predictor":
        total = total + aw * aux["predictor_bce"]
    elif akind != "none":
        raise ValueError("unknown aux %r" % akind)
    lbw = float(cfg.get("load_balance_weight", 0) or 0)
    if lbw != 0.0:
        total = total + lbw * aux["load_balance"]
    aux["total"] = total

    res = {
        "out": out,
        "router_logits": r,
        "selected": selected_array([written.get(b, s) for b, s in enumerate(sel)]),
        "weights": w_out,
        "multipliers": multipliers,
        "targets": t,
        "aux": aux,
        "sel": sel,
        "topk": topk,
        "gaps": gaps,
        "mask": m,
    }
    if has_pred:
        res["predictor_logits"] = q
        corr = (((q > 0).to(DTYPE) == t).to(DTYPE) * vm).sum()
        res["predictor_accuracy"] = (corr / nvalid).detach() if nvalid > 0 else corr.detach() * 0
        if deviates("aux_over_padding"):
            res["predictor_accuracy"] = ((qf > 0).to(DTYPE) == t).to(DTYPE).mean().detach()
    return res


def selected_array(sel):
    kmax = max([len(s) for s in sel] + [0])
    a = torch.full((len(sel), kmax), -1, dtype=torch.long)
    for b, s in enumerate(sel):
        for j, i in enumerate(s):
            a[b, j] = i
    return a


def dense_layer(x, valid, P, cfg):
    """A dense (unrouted) pre-norm block applied to every valid token: x + f(x)."""
    B, S, d = x.shape
    rows = []
    for b in range(B):
        n = int(valid[b])
        pos = torch.arange(n)
        ob = x[b, :n] + block_update(x[b, :n], pos, P, cfg)
        if n < S:
            ob = torch.cat([ob, x[b, n:]], dim=0)
        rows.append(ob)
    return torch.stack(rows, dim=0)


# --------------------------------------------------------------------------
# The small language model (docs/spec.md §10 patterns; embedding, head, CE)

def layer_params(P, l):
    pre = "L%d." % l
    return {k[len(pre):]: v for k, v in P.items() if k.startswith(pre)}


def embed(tokens, P, cfg_model, valid):
    B, S = tokens.shape
    h = P["Embed"][tokens.clamp(min=0)]
    if "PosEmbed" in P:
        h = h + P["PosEmbed"][:S][None, :, :]
    return h * valid_mask_of(valid, B, S)[:, :, None]


def final_cfg(cfg_model):
    """Norm settings of the final norm: those of the first layer (all layers share them)."""
    return cfg_model["layers"][0]["layer"]


def model_forward(tokens, valid, P, cfg_model, noises=None, jitters=None):
    """Full-sequence forward of the LM. Returns dict with logits (B x S x V) and per-layer results."""
    global _first_selection
    _first_selection = None
    noises = noises or {}
    jitters = jitters or {}
    B, S = tokens.shape
    h = embed(tokens, P, cfg_model, valid)
    per_layer = {}
    aux_total = torch.zeros((), dtype=DTYPE)
    shared = None   # shared_router: the first routed layer's router, used by every routed layer
    for l, spec in enumerate(cfg_model["layers"]):
        Pl = layer_params(P, l)
        lc = spec["layer"]
        if spec.get("routed", False) and deviates("shared_router"):
            if shared is None:
                shared = {k: Pl[k] for k in ("Router", "RouterBias") if k in Pl}
            else:
                Pl.update(shared)
        if spec.get("routed", False):
            res = routed_layer(h, valid, Pl, lc, noises.get(l), jitters.get(l))
            per_layer[l] = res
            aux_total = aux_total + res["aux"]["total"]
            h = res["out"]
        else:
            h = dense_layer(h, valid, Pl, lc)
    fc = final_cfg(cfg_model)
    hn = norm(h, P, "FinalNorm", fc)
    logits = (hn @ P["Head"]) * valid_mask_of(valid, B, S)[:, :, None]
    return {"logits": logits, "layers": per_layer, "aux_total": aux_total, "hidden": h}


def cross_entropy(logits, targets):
    """Mean CE over targets != -1 (ignore index -1)."""
    Vn = logits.shape[-1]
    lf = logits.reshape(-1, Vn)
    tf = targets.reshape(-1)
    keep = tf != -1
    if int(keep.sum()) == 0:
        return lf.sum() * 0
    if NATIVE:
        return torch.nn.functional.cross_entropy(lf, tf, ignore_index=-1)
    lse = torch.logsumexp(lf[keep], dim=-1)
    picked = lf[keep].gather(1, tf[keep][:, None]).squeeze(1)
    return (lse - picked).mean()


# --------------------------------------------------------------------------
# Token-by-token decoding with per-layer caches (docs/spec.md §9)

def decode(tokens, valid, P, cfg_model):
    """Decode each row token by token. A routed layer's cache holds only the tokens
    routed through it (keys already rotated at their original positions); a dense
    layer caches every token. Returns (logits B x S x V, routed dict l -> B x S).

    A planted layer deviation is decoded as the full forward has it (a port makes
    the same mistake in both, as modref's emulation decodes it): tanh_gate's gate,
    no_weighting's weight of 1, the update of residual_twice, residual_scaled and
    weight_mlp_only, skipped_scaled's g * x for a skipped token, and
    rope_gathered_indices' RoPE at the token's slot in the layer's cache."""
    B, S = tokens.shape
    L = len(cfg_model["layers"])
    Vn = P["Head"].shape[1]
    logits = torch.zeros(B, S, Vn, dtype=DTYPE)
    routed = {l: torch.zeros(B, S, dtype=torch.long)
              for l, s in enumerate(cfg_model["layers"]) if s.get("routed", False)}
    fc = final_cfg(cfg_model)
    # shared_router: the first routed layer's router decodes for every routed
    # layer, as in the full forward (one router module, called by each).
    shared_params = {}
    if deviates("shared_router"):
        first = next(l for l, sp in enumerate(cfg_model["layers"]) if sp.get("routed", False))
        shared_params = {k: v for k, v in layer_params(P, first).items() if k in ("Router", "RouterBias")}
    for b in range(B):
        # cache[l] = (list of k (KV x dh), list of v, list of positions)
        cache = [([], [], []) for _ in range(L)]
        for t in range(int(valid[b])):
            pos = torch.tensor([t])
            x = P["Embed"][int(tokens[b, t])][None, :]
            if "PosEmbed" in P:
                x = x + P["PosEmbed"][t][None, :]
            for l, spec in enumerate(cfg_model["layers"]):
                Pl = layer_params(P, l)
                lc = spec["layer"]
                kc, vc, pc = cache[l]
                if not spec.get("routed", False):
                    h = norm(x, Pl, "Norm1", lc)
                    q, k, v = attention_qkv(h, pos, Pl, lc)
                    kc.append(k[0]); vc.append(v[0]); pc.append(t)
                    a = attend(q, pos, torch.stack(kc), torch.stack(vc), torch.tensor(pc), Pl, window_of(lc))
                    hh = x + a
                    x = hh + mlp_block(hh, Pl, lc)
                    continue
                mode = lc.get("causal", "off")
                if mode not in ("router", "predictor"):
                    raise ValueError("decode needs causal routing at layer %d" % l)
                if lc.get("weighting") == "softmax":
                    raise ValueError("softmax weighting is not causal")
                Pl = dict(Pl, **shared_params)
                r = router_logits(x[None], Pl, dict(lc, jitter=0))[0]      # 1
                z = r if mode == "router" else predictor_logits(x[None], Pl)[0]
                go = float(z[0]) > 0.0
                g = weights_of(r[None], torch.ones(1, 1, dtype=DTYPE), None, lc.get("weighting", "raw"))[0]
                if deviates("tanh_gate"):   # p-MoD's TanhNorm, as in the full forward
                    g = 0.2 * torch.tanh(r) + 1
                if lc.get("mlp_only", False):
                    if deviates("decode_mismatch"):   # routing off at inference
                        go = True
                    h = norm(x, Pl, "Norm1", lc)
                    q, k, v = attention_qkv(h, pos, Pl, lc)
                    kc.append(k[0]); vc.append(v[0]); pc.append(t)
                    xp = x + attend(q, pos, torch.stack(kc), torch.stack(vc), torch.tensor(pc), Pl, window_of(lc))
                    if go:
                        xp = xp + decoded_update(xp, None, mlp_block(xp, Pl, lc), g)
                        routed[l][b, t] = 1
                    elif deviates("skipped_scaled"):
                        xp = g[:, None] * xp
                    x = xp
                    continue
                if not go and deviates("decode_mismatch"):   # a skipped token cached
                    h = norm(x, Pl, "Norm1", lc)
                    _, k, v = attention_qkv(h, pos, Pl, lc)
                    kc.append(k[0]); vc.append(v[0]); pc.append(t)
                if go:
                    routed[l][b, t] = 1
                    h = norm(x, Pl, "Norm1", lc)
                    slot = torch.tensor([len(pc)])
                    if deviates("rope_gathered_indices"):   # RoPE at the cache slot, the decoder's gathered index
                        q, k, v = attention_qkv(h, slot, Pl, lc)
                        kc.append(k[0]); vc.append(v[0]); pc.append(len(pc))
                    else:
                        q, k, v = attention_qkv(h, pos, Pl, lc)
                        kc.append(k[0]); vc.append(v[0]); pc.append(t)
                    if deviates("window_gathered_indices"):   # the window counted in cache slots
                        n = len(pc)
                        a = attend(q, torch.tensor([n - 1]), torch.stack(kc), torch.stack(vc), torch.arange(n), Pl, window_of(lc))
                    else:
                        a = attend(q, torch.tensor([pc[-1]]), torch.stack(kc), torch.stack(vc), torch.tensor(pc), Pl, window_of(lc))
                    x = x + decoded_update(x, a, mlp_block(x + a, Pl, lc), g)
                elif deviates("skipped_scaled"):   # p-MoD's STRing: a skipped token is g * x
                    x = g[:, None] * x
            hn = norm(x, P, "FinalNorm", fc)
            logits[b, t] = (hn @ P["Head"])[0]
    return logits, routed


def decoded_update(x, a, m, g):
    """What a decoded routed token adds to its residual stream x: x + a + g * m under
    weight_mlp_only (a = None: the attention's update is in x already), the full
    forward's formula otherwise: g * (a + m), with residual_twice g * (x + a + m),
    with residual_scaled g * (x + a + m) - x, with no_weighting a + m."""
    f = m if a is None else a + m
    if deviates("residual_twice") and deviates("weight_mlp_only") and a is not None:
        return x + a + g[:, None] * m
    if deviates("weight_mlp_only") and a is not None:
        return a + g[:, None] * m
    if deviates("residual_twice"):
        return g[:, None] * (x + f)
    if deviates("residual_scaled"):
        return g[:, None] * (x + f) - x
    if deviates("no_weighting"):
        return f
    if a is not None:
        return g[:, None] * (x + a + m - x)   # x + g (y - x), y the block's output, as ref decodes
    return g[:, None] * f


# --------------------------------------------------------------------------
# Mixture-of-Depths-and-Experts (docs/spec.md §14)

def expert_capacity(ce, n):
    """k_e = clamp(floor(c_e * n), 1, n) with the float-robust floor; 0 when n = 0."""
    if n <= 0:
        return 0
    return max(1, min(robust_floor(float(ce) * n), n))


def mode_layer(x, P, cfg):
    """Forward of one MoDE layer, staged or integrated (docs/spec.md §14).

    x: B x S x d (no padding); P: parameter name -> tensor; cfg: the manifest's "mode"
    object. Staged: the MoD router r = x @ Router picks the top-k tokens of each row
    (capacity ratio c), which pass causal attention at their original positions and
    then the experts; out = x + r (a + m) for them, x for the others. Integrated:
    attention over every token, out = x + a + m. For the n tokens reaching the experts,
    u = N2(x + a), G = softmax(u @ Gate) over E experts (plus the no-op ones); each
    expert takes the k_e tokens with its largest gate; m_i sums G_ie * MLP_e(u_i) over
    the conventional experts that took token i (no-op experts add nothing).
    Returns out, router_logits and selected (staged only), gates (B x S x E', 0 where
    no token reached the experts), expert_choice (B x E' x k_e positions) and gaps (per
    decision, per row: the MoD router's gap (staged), then the smallest expert gap).
    """
    B, S, d = x.shape
    staged = cfg["form"] == "staged"
    if cfg["form"] not in ("staged", "integrated"):
        raise ValueError("unknown MoDE form %r" % cfg["form"])
    E = int(cfg["experts"])
    width = E + int(cfg.get("noop_experts", 0) or 0)
    ce = float(cfg["expert_capacity"])
    res = {}
    if staged:
        r = x @ P["Router"]
        k = capacity({"kind": "ratio", "ratio": cfg["capacity"]}, S)
        sel = [topk_select(r[b].detach(), k, row=b) for b in range(B)]
        res["router_logits"] = r
        res["selected"] = selected_array(sel)
        router_gaps = [boundary_gap(r[b].detach(), k) for b in range(B)]
    else:
        sel = [list(range(S)) for _ in range(B)]
    gates = torch.zeros(B, S, width, dtype=DTYPE)
    choice, gate_gaps, rows = [], [], []
    for b in range(B):
        idx = torch.tensor(sel[b], dtype=torch.long)
        xs = x[b, idx]
        a = attn_block(xs, idx, P, cfg)
        u = norm(xs + a, P, "Norm2", cfg)
        G = torch.softmax(u @ P["Gate"], dim=-1)              # n x E'
        gates[b, idx] = G.detach().to(DTYPE)                 # G is bf16 under autocast
        n = len(sel[b])
        ke = expert_capacity(ce, n)
        row_choice, gaps = [], []
        m = torch.zeros(n, d, dtype=DTYPE)
        for e in range(width):
            took = topk_select(G[:, e].detach(), ke)          # indices among the n tokens
            row_choice.append([sel[b][t] for t in took])
            gap = boundary_gap(G[:, e].detach(), ke)
            if gap is not None:
                gaps.append(gap)
            if e >= E or not took:
                continue                                       # a no-op expert: f = 0
            it = torch.tensor(took, dtype=torch.long)
            We = {w: P["Expert%d.%s" % (e, w)] for w in ("W1", "W2", "W3") if "Expert%d.%s" % (e, w) in P}
            y = mlp(u[it], We, cfg)
            gate = torch.ones(len(took), 1, dtype=DTYPE) if deviates("mode_ungated_experts") else G[it, e][:, None]
            m = m.index_add(0, it, (gate * y).to(DTYPE))          # bf16 under autocast
        f = a + m
        upd = r[b, idx][:, None] * f if staged else f
        rows.append(x[b].index_add(0, idx, upd.to(DTYPE)))
        choice.append(row_choice)
        gate_gaps.append(min(gaps) if gaps else -1.0)
    res["out"] = torch.stack(rows, dim=0)
    res["gates"] = gates
    res["expert_choice"] = torch.tensor(choice, dtype=torch.long)
    res["gaps"] = ([[-1.0 if g is None else g for g in router_gaps]] if staged else []) + [gate_gaps]
    return res
