"""Unit tests of mod_torch (run: /usr/bin/python3 -m unittest discover golden/torch)."""

import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mod_torch as M  # noqa: E402

torch.set_default_dtype(torch.float64)


def layer_cfg(**kw):
    c = {"d_model": 8, "heads": 2, "d_ff": 16, "norm": "rmsnorm", "norm_eps": 1e-6,
         "mlp": "gelu", "positions": "rope", "rope_base": 10000, "router": "linear",
         "jitter": 0, "capacity": {"kind": "ratio", "ratio": 0.5}, "weighting": "raw",
         "compute": "gather", "mlp_only": False, "aux": "none", "aux_weight": 0,
         "load_balance_weight": 0, "predictor_hidden": 4, "causal": "off"}
    c.update(kw)
    return c


def layer_params(cfg, gen, prefix=""):
    d, f, h = cfg["d_model"], cfg["d_ff"], cfg["predictor_hidden"]

    def rn(*shape, s=0.3):
        return torch.randn(*shape, generator=gen) * s

    P = {"Norm1": 1 + rn(d, s=0.1), "Wq": rn(d, d), "Wk": rn(d, d), "Wv": rn(d, d), "Wo": rn(d, d),
         "Norm2": 1 + rn(d, s=0.1), "W1": rn(d, f), "W2": rn(f, d), "Router": rn(d),
         "RouterBias": rn(1), "PredW1": rn(d, h), "PredB1": rn(h), "PredW2": rn(h, 1), "PredB2": rn(1)}
    if cfg["norm"] == "layernorm":
        P["Norm1Bias"] = rn(d, s=0.1)
        P["Norm2Bias"] = rn(d, s=0.1)
    if cfg["mlp"] == "swiglu":
        P["W3"] = rn(d, f)
    return {prefix + k: v for k, v in P.items()}


class TestCapacity(unittest.TestCase):
    def test_float_robust_floor(self):
        self.assertEqual(0.29 * 100, 28.999999999999996)
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 0.29}, 100), 29)
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 0.57}, 100), 57)
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 0.5}, 7), 3)

    def test_clamp(self):
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 0.01}, 8), 1)
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 1.0}, 8), 8)
        self.assertEqual(M.capacity({"kind": "ratio", "ratio": 0.5}, 0), 0)

    def test_integer(self):
        self.assertEqual(M.capacity({"kind": "integer", "tokens": 3}, 8), 3)
        with self.assertRaises(ValueError):
            M.capacity({"kind": "integer", "tokens": 0}, 8)

    def test_log(self):
        cap = {"kind": "log", "ratio": 0.5, "max_len": 16}
        self.assertEqual(M.capacity(cap, 1), 1)
        self.assertEqual(M.capacity(cap, 16), 8)            # ratio(S_max) = c
        # S = 4: ratio = 1 - (ln4/ln16) * 0.5 = 0.75 -> floor(3) = 3
        self.assertEqual(M.capacity(cap, 4), 3)

    def test_anneal(self):
        self.assertAlmostEqual(M.annealed_ratio(1.0, 0.5, 5, 10), 0.75)
        self.assertEqual(M.annealed_ratio(1.0, 0.5, 50, 10), 0.5)


class TestSelection(unittest.TestCase):
    def test_ties_to_lower_position_ascending(self):
        r = torch.tensor([0.5, 2.0, 0.5, 2.0, 0.5, -1.0])
        self.assertEqual(M.topk_select(r, 3), [0, 1, 3])
        self.assertEqual(M.topk_select(r, 2), [1, 3])
        self.assertEqual(M.topk_select(torch.tensor([3.0, 1.0, 2.0]), 2), [0, 2])

    def test_nan_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "position 2"):
            M.topk_select(torch.tensor([1.0, 0.0, float("nan")]), 1)
        cfg = layer_cfg(router="random")
        noise = torch.zeros(2, 4)
        noise[1, 3] = float("nan")
        P = layer_params(cfg, torch.Generator().manual_seed(0))
        with self.assertRaisesRegex(ValueError, "row 1, position 3"):
            M.routed_layer(torch.zeros(2, 4, 8), [4, 4], P, cfg, noise=noise)


class TestRope(unittest.TestCase):
    def test_relative_position(self):
        g = torch.Generator().manual_seed(1)
        q = torch.randn(1, 1, 8, generator=g)
        k = torch.randn(1, 1, 8, generator=g)

        def dot(m, n):
            return float((M.rope(q, torch.tensor([m]), 10000) * M.rope(k, torch.tensor([n]), 10000)).sum())
        self.assertAlmostEqual(dot(5, 2), dot(13, 10), places=12)
        self.assertAlmostEqual(dot(0, 0), float((q * k).sum()), places=12)
        self.assertNotAlmostEqual(dot(5, 2), dot(5, 3), places=6)

    def test_rotate_half_pairing(self):
        # coordinate j pairs with j + d_h/2, angle pos * base^(-2j/d_h)
        x = torch.zeros(1, 1, 8)
        x[0, 0, 1] = 1.0
        y = M.rope(x, torch.tensor([3]), 10000)[0, 0]
        ang = 3 * 10000 ** (-2 * 1 / 8)
        self.assertAlmostEqual(float(y[1]), math.cos(ang), places=14)
        self.assertAlmostEqual(float(y[5]), math.sin(ang), places=14)
        self.assertEqual(float(y.abs().sum() - y[1].abs() - y[5].abs()), 0.0)


def fd_grad(fn, t, h=1e-5, limit=24):
    """Central differences of fn at (at most `limit`, evenly spaced) elements of t; NaN elsewhere."""
    g = torch.full_like(t, float("nan"))
    flat = t.view(-1)
    step = max(1, flat.numel() // limit)
    for i in range(0, flat.numel(), step):
        old = float(flat[i])
        flat[i] = old + h
        fp = float(fn())
        flat[i] = old - h
        fm = float(fn())
        flat[i] = old
        g.view(-1)[i] = (fp - fm) / (2 * h)
    return g


class TestLayer(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(7)

    def run_layer(self, cfg, x, valid, P, **kw):
        return M.routed_layer(x, valid, P, cfg, **kw)

    def test_full_capacity_equals_dense_block(self):
        cfg = layer_cfg(capacity={"kind": "ratio", "ratio": 1.0}, weighting="none")
        P = layer_params(cfg, self.gen)
        x = torch.randn(2, 6, 8, generator=self.gen)
        out = M.routed_layer(x, [6, 6], P, cfg)["out"]
        self.assertTrue(torch.allclose(out, M.dense_layer(x, [6, 6], P, cfg), atol=1e-13, rtol=0))

    def test_dense_ste_forward_equals_gather(self):
        for mo in (False, True):
            cfg = layer_cfg(mlp_only=mo)
            P = layer_params(cfg, self.gen)
            x = torch.randn(2, 6, 8, generator=self.gen)
            a = M.routed_layer(x, [6, 4], P, cfg)
            # dense attends over all valid tokens, gather only over the selected ones:
            # only equal when MLP-only (attention is dense in both) ...
            b = M.routed_layer(x, [6, 4], P, dict(cfg, compute="dense"))
            if mo:
                self.assertTrue(torch.allclose(a["out"], b["out"], atol=1e-13, rtol=0))
            # ... and unselected tokens pass through unchanged in both
            m = a["mask"]
            self.assertTrue(torch.equal(a["out"][m == 0], b["out"][m == 0]))

    def test_ste_router_gradient_is_f_for_every_token(self):
        cfg = layer_cfg(compute="dense", weighting="sigmoid")
        P = layer_params(cfg, self.gen)
        x = torch.randn(1, 6, 8, generator=self.gen)
        U = torch.randn(1, 6, 8, generator=self.gen)
        # d loss / d g_i = U_i . f_i for all i, selected or not
        f = M.block_update(x[0], torch.arange(6), P, cfg)
        Pr = dict(P)
        Pr["Router"] = P["Router"].clone().requires_grad_(True)
        res = M.routed_layer(x, [6], Pr, cfg)
        (res["out"] * U).sum().backward()
        rr = (x[0] @ P["Router"])
        want = ((U[0] * f).sum(-1) * torch.sigmoid(rr) * (1 - torch.sigmoid(rr))) @ x[0]
        self.assertTrue(torch.allclose(Pr["Router"].grad, want, atol=1e-12, rtol=1e-10))

    def test_gradients_match_finite_differences(self):
        for kw in ({}, {"weighting": "softmax"}, {"weighting": "sigmoid", "norm": "layernorm"},
                   {"mlp": "swiglu", "router": "linear_bias"}, {"mlp_only": True},
                   {"router": "l2norm"}, {"aux": "router_bce", "aux_weight": 0.3,
                                          "load_balance_weight": 0.2}):
            cfg = layer_cfg(**kw)
            P = layer_params(cfg, self.gen)
            x = torch.randn(2, 6, 8, generator=self.gen)
            U = torch.randn(2, 6, 8, generator=self.gen)
            valid = [6, 5]

            def loss():
                res = M.routed_layer(x, valid, P, cfg)
                return (res["out"] * U).sum() + res["aux"]["total"]
            sel0 = M.routed_layer(x, valid, P, cfg)["sel"]
            leaves = [x] + list(P.values())
            for t in leaves:
                t.requires_grad_(True)
            gs = torch.autograd.grad(loss(), leaves, allow_unused=True)
            with torch.no_grad():
                for t, g in zip(leaves, gs):
                    want = fd_grad(loss, t)
                    got = torch.zeros_like(t) if g is None else g
                    k = ~torch.isnan(want)
                    self.assertTrue(torch.allclose(got[k], want[k], atol=1e-7, rtol=1e-6), (kw, t.shape))
                self.assertEqual(M.routed_layer(x, valid, P, cfg)["sel"], sel0)

    def test_padding_is_invisible(self):
        cfg = layer_cfg(aux="predictor", aux_weight=0.5, load_balance_weight=0.1)
        P = layer_params(cfg, self.gen)
        x = torch.randn(2, 7, 8, generator=self.gen)
        y = x.clone()
        y[1, 4:] = torch.randn(3, 8, generator=self.gen) * 10
        a = M.routed_layer(x, [7, 4], P, cfg)
        b = M.routed_layer(y, [7, 4], P, cfg)
        self.assertTrue(torch.equal(a["out"][:, :4], b["out"][:, :4]))
        self.assertTrue(torch.equal(a["out"][0], b["out"][0]))
        self.assertTrue(torch.equal(a["aux"]["total"], b["aux"]["total"]))
        self.assertTrue(torch.equal(a["out"][1, 4:], x[1, 4:]))
        self.assertTrue(torch.all(a["router_logits"][1, 4:] == 0))
        # an empty row selects nothing
        c = M.routed_layer(x, [7, 0], P, cfg)
        self.assertEqual(c["sel"][1], [])

    def test_capacity_and_selection_in_layer(self):
        cfg = layer_cfg(capacity={"kind": "ratio", "ratio": 0.5})
        P = layer_params(cfg, self.gen)
        x = torch.randn(2, 8, 8, generator=self.gen)
        res = M.routed_layer(x, [8, 5], P, cfg)
        self.assertEqual([len(s) for s in res["sel"]], [4, 2])
        self.assertEqual(res["selected"].shape, (2, 4))
        self.assertEqual(int(res["selected"][1, 3]), -1)

    def test_predictor_sees_no_trunk_gradient(self):
        cfg = layer_cfg(aux="predictor", aux_weight=1.0)
        P = layer_params(cfg, self.gen)
        x = torch.randn(2, 6, 8, generator=self.gen).requires_grad_(True)
        P["PredB2"].requires_grad_(True)
        res = M.routed_layer(x, [6, 6], P, cfg)
        g, = torch.autograd.grad(res["aux"]["predictor_bce"], [x], allow_unused=True)
        self.assertIsNone(g)


class TestWindow(unittest.TestCase):
    """docs/spec.md §13: a routed block's window is counted in original positions."""

    def setUp(self):
        self.gen = torch.Generator().manual_seed(11)

    def test_window_in_original_positions(self):
        cfg = layer_cfg(capacity={"kind": "ratio", "ratio": 0.5})
        P = layer_params(cfg, self.gen)
        x = torch.randn(2, 8, 8, generator=self.gen)
        valid = [8, 6]
        plain = M.routed_layer(x, valid, P, cfg)
        # a window at least as long as the row is no window at all
        wide = M.routed_layer(x, valid, P, dict(cfg, window=8))
        self.assertTrue(torch.equal(plain["out"], wide["out"]))
        # w = 1: each selected token attends to itself only, f_i = block_update of a
        # one-token sequence at its position
        one = M.routed_layer(x, valid, P, dict(cfg, window=1))
        for b in range(2):
            for i in one["sel"][b]:
                it = torch.tensor([i])
                f = M.block_update(x[b, it], it, P, cfg)
                want = x[b, i] + one["multipliers"][b, i] * f[0]
                self.assertTrue(torch.allclose(one["out"][b, i], want, atol=1e-13, rtol=0))
        # w = 2 by original position: a selected token whose selected predecessor is
        # two or more positions back attends to itself only
        cfg2 = dict(cfg, window=2)
        two = M.routed_layer(x, valid, P, cfg2)
        checked = 0
        for b in range(2):
            sel = two["sel"][b]
            for j, i in enumerate(sel):
                if j > 0 and i - sel[j - 1] >= 2:
                    it = torch.tensor([i])
                    f = M.block_update(x[b, it], it, P, cfg)
                    want = x[b, i] + two["multipliers"][b, i] * f[0]
                    self.assertTrue(torch.allclose(two["out"][b, i], want, atol=1e-13, rtol=0))
                    checked += 1
        self.assertGreater(checked, 0)
        # counting the window in gathered indices is the named deviation, and differs
        M.DEVIATION = "window_gathered_indices"
        try:
            dev = M.routed_layer(x, valid, P, cfg2)
        finally:
            M.DEVIATION = None
        self.assertFalse(torch.allclose(dev["out"], two["out"], atol=1e-6, rtol=0))


class TestPortDeviations(unittest.TestCase):
    """weight_mlp_only and gather_first_k (docs/spec.md §11), against their definitions."""

    def setUp(self):
        self.gen = torch.Generator().manual_seed(5)
        self.cfg = layer_cfg()
        self.P = layer_params(self.cfg, self.gen)
        self.valid = [8, 8]

    def planted(self, name, x):
        M.DEVIATION = name
        try:
            return M.routed_layer(x, self.valid, self.P, self.cfg)
        finally:
            M.DEVIATION = None

    def test_weight_mlp_only(self):
        x = torch.randn(2, 8, 8, generator=self.gen)
        ref = M.routed_layer(x, self.valid, self.P, self.cfg)
        dev = self.planted("weight_mlp_only", x)
        both = self.planted("residual_twice+weight_mlp_only", x)
        for b in range(2):
            it = torch.tensor(ref["sel"][b])
            a = M.attn_block(x[b, it], it, self.P, self.cfg)
            g = ref["multipliers"][b, it][:, None]
            # x + a + g m = x + g (a + m) + (1 - g) a; other tokens keep x
            self.assertTrue(torch.allclose(dev["out"][b, it], ref["out"][b, it] + (1 - g) * a, atol=1e-12, rtol=0))
            # the returned residual is added unweighted: x + (x + a + g m)
            self.assertTrue(torch.allclose(both["out"][b, it], dev["out"][b, it] + x[b, it], atol=1e-12, rtol=0))
        self.assertTrue(torch.equal(dev["out"] * (1 - ref["mask"])[:, :, None], x * (1 - ref["mask"])[:, :, None]))
        self.assertFalse(torch.allclose(dev["out"], ref["out"], atol=1e-6, rtol=0))

    def shaped(self, rank):
        """x whose router weights put positions 0..3 on top, ordered by rank(i)."""
        x = torch.randn(2, 8, 8, generator=self.gen) * 0.1
        w = self.P["Router"]
        for i in range(8):
            x[:, i] += (10 + rank(i) if i < 4 else -20) * w / (w @ w)
        return x

    def test_gather_first_k_selecting_first_k_in_score_order_is_the_oracle(self):
        # top-k returns positions 0..3 in position order: argsort is the identity
        x = self.shaped(lambda i: -i)
        ref = M.routed_layer(x, self.valid, self.P, self.cfg)
        self.assertEqual(ref["sel"], [[0, 1, 2, 3], [0, 1, 2, 3]])
        dev = self.planted("gather_first_k", x)
        self.assertTrue(torch.allclose(dev["out"], ref["out"], atol=1e-12, rtol=0))

    def test_gather_first_k_reversed(self):
        # top-k returns 3, 2, 1, 0: argsort gathers positions 3, 2, 1, 0 in that
        # order (the causal mask follows it), the t-th weighted by g at position t
        x = self.shaped(lambda i: i)
        ref = M.routed_layer(x, self.valid, self.P, self.cfg)
        dev = self.planted("gather_first_k", x)
        rev = torch.tensor([3, 2, 1, 0])
        for b in range(2):
            f = M.block_update(x[b, rev], rev, self.P, self.cfg, mask_pos=torch.arange(4))
            for t in range(4):
                g = ref["multipliers"][b, t]
                self.assertTrue(torch.allclose(dev["out"][b, rev[t]], x[b, rev[t]] + g * f[t], atol=1e-12, rtol=0))
                self.assertEqual(float(dev["multipliers"][b, rev[t]]), float(g))
        self.assertFalse(torch.allclose(dev["out"], ref["out"], atol=1e-6, rtol=0))

    def test_gather_first_k_leaves_selected_tokens_past_k(self):
        x = torch.randn(2, 8, 8, generator=self.gen)
        ref = M.routed_layer(x, self.valid, self.P, self.cfg)
        dev = self.planted("gather_first_k", x)
        for b in range(2):
            for i in range(4, 8):
                self.assertTrue(torch.equal(dev["out"][b, i], x[b, i]))
            self.assertTrue(any(i >= 4 for i in ref["sel"][b]))
        self.assertEqual(dev["sel"], ref["sel"])


class TestModel(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(3)

    def make(self, causal, mlp_only=False, positions="rope", window=0):
        layers = []
        P = {}
        for l in range(4):
            routed = l % 2 == 1
            cfg = layer_cfg(causal=causal if routed else "off", mlp_only=mlp_only, positions=positions,
                            aux="predictor" if causal == "predictor" else "router_bce", aux_weight=0.1,
                            window=window)
            layers.append({"routed": routed, "layer": cfg})
            P.update(layer_params(cfg, self.gen, "L%d." % l))
        V = 11
        P["Embed"] = torch.randn(V, 8, generator=self.gen)
        P["FinalNorm"] = torch.ones(8)
        P["Head"] = torch.randn(8, V, generator=self.gen) * 0.3
        if positions == "learned":
            P["PosEmbed"] = torch.randn(9, 8, generator=self.gen) * 0.1
        return {"batch": 2, "seq_len": 9, "vocab": V, "max_len": 9, "layers": layers}, P

    def test_decode_equals_full_causal_forward(self):
        for causal in ("router", "predictor"):
            for mo in (False, True):
                for pos, window in (("rope", 0), ("learned", 0), ("rope", 2), ("learned", 3)):
                    cfg, P = self.make(causal, mo, pos, window)
                    tokens = torch.randint(0, 11, (2, 9), generator=self.gen)
                    valid = [9, 6]
                    full = M.model_forward(tokens, valid, P, cfg)
                    dl, routed = M.decode(tokens, valid, P, cfg)
                    self.assertTrue(torch.allclose(full["logits"], dl, atol=1e-12, rtol=0))
                    for l, r in routed.items():
                        self.assertTrue(torch.equal(r, full["layers"][l]["mask"].to(torch.long)))
                    nr = sum(int(r.sum()) for r in routed.values())
                    self.assertTrue(0 < nr < 2 * 15, nr)

    def test_cross_entropy_ignore_index(self):
        logits = torch.randn(2, 3, 5, generator=self.gen)
        t = torch.tensor([[1, -1, 4], [-1, -1, 0]])
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, 5), t.reshape(-1), ignore_index=-1)
        self.assertAlmostEqual(float(M.cross_entropy(logits, t)), float(want), places=13)


if __name__ == "__main__":
    unittest.main()


def mode_cfg(**kw):
    c = {"d_model": 8, "heads": 2, "d_ff": 16, "norm": "rmsnorm", "norm_eps": 1e-6,
         "mlp": "gelu", "positions": "rope", "rope_base": 10000,
         "form": "staged", "experts": 1, "noop_experts": 0, "capacity": 0.5, "expert_capacity": 1.0}
    c.update(kw)
    return c


def mode_params(cfg, gen):
    d, f = cfg["d_model"], cfg["d_ff"]
    E, width = cfg["experts"], cfg["experts"] + cfg["noop_experts"]

    def rn(*shape, s=0.3):
        return torch.randn(*shape, generator=gen) * s

    P = {"Norm1": 1 + rn(d, s=0.1), "Wq": rn(d, d), "Wk": rn(d, d), "Wv": rn(d, d), "Wo": rn(d, d),
         "Norm2": 1 + rn(d, s=0.1), "Router": rn(d), "Gate": rn(d, width)}
    for e in range(E):
        P["Expert%d.W1" % e], P["Expert%d.W2" % e] = rn(d, f), rn(f, d)
        if cfg["mlp"] == "swiglu":
            P["Expert%d.W3" % e] = rn(d, f)
    return P


class TestMoDE(unittest.TestCase):
    def test_staged_one_expert_is_mod(self):
        # one expert of capacity 1: its gate is softmax of one logit, 1, and it takes
        # every selected token, so staged MoDE is the paper's routed layer (Eq. 1)
        gen = torch.Generator().manual_seed(3)
        cfg = mode_cfg()
        P = mode_params(cfg, gen)
        x = torch.randn(2, 8, 8, generator=gen)
        res = M.mode_layer(x, P, cfg)
        LP = dict(P, W1=P["Expert0.W1"], W2=P["Expert0.W2"])
        want = M.routed_layer(x, [8, 8], LP, layer_cfg())
        self.assertTrue(torch.allclose(res["out"], want["out"], rtol=0, atol=1e-14))
        self.assertTrue(torch.equal(res["selected"], want["selected"]))
        self.assertEqual(res["expert_choice"].tolist(), [[s] for s in want["sel"]])

    def test_integrated_capacity_and_noop(self):
        # every expert, the no-op one included, takes exactly k_e tokens; a token no
        # conventional expert took comes out as x + a, identical to the output with
        # every expert's W2 zeroed
        gen = torch.Generator().manual_seed(5)
        cfg = mode_cfg(form="integrated", experts=2, noop_experts=1, capacity=0, expert_capacity=0.375)
        P = mode_params(cfg, gen)
        x = torch.randn(2, 8, 8, generator=gen)
        res = M.mode_layer(x, P, cfg)
        self.assertEqual(tuple(res["expert_choice"].shape), (2, 3, 3))
        silent = dict(P, **{"Expert%d.W2" % e: torch.zeros(16, 8) for e in range(2)})
        base = M.mode_layer(x, silent, cfg)["out"]
        untouched = 0
        for b in range(2):
            took = set(res["expert_choice"][b, :2].reshape(-1).tolist())
            for i in range(8):
                if i not in took:
                    untouched += 1
                    self.assertTrue(torch.equal(res["out"][b, i], base[b, i]))
        self.assertGreater(untouched, 0)

    def test_ungated_deviation_changes_out(self):
        gen = torch.Generator().manual_seed(7)
        cfg = mode_cfg(experts=3, expert_capacity=0.5)
        P = mode_params(cfg, gen)
        x = torch.randn(1, 8, 8, generator=gen)
        M.DEVIATION = None
        want = M.mode_layer(x, P, cfg)["out"]
        M.DEVIATION = "mode_ungated_experts"
        try:
            got = M.mode_layer(x, P, cfg)["out"]
        finally:
            M.DEVIATION = None
        self.assertGreater(float((got - want).abs().max()), 1e-3)
