"""Tests of check_corpus.py on small synthetic cases (no corpus needed)."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_corpus as C  # noqa: E402
import mod_torch as M  # noqa: E402
from test_mod_torch import layer_cfg, layer_params  # noqa: E402


def write_case(d, name, mutate=None, version=1, valid=(6, 6)):
    """A layer case whose expected values are mod_torch's own (autograd gradients)."""
    gen = torch.Generator().manual_seed(11)
    cfg = layer_cfg()
    P = {k: v for k, v in layer_params(cfg, gen).items()
         if not k.startswith("Pred") and k != "RouterBias"}
    x = torch.randn(2, 6, 8, generator=gen)
    U = torch.randn(2, 6, 8, generator=gen)
    leaves = [x] + list(P.values())
    for t in leaves:
        t.requires_grad_(True)
    U = U * M.valid_mask_of(list(valid), 2, 6)[:, :, None]
    res = M.routed_layer(x, list(valid), P, cfg)
    loss = (U * res["out"]).sum() + res["aux"]["total"]
    gs = torch.autograd.grad(loss, leaves, allow_unused=True)
    arrays = {"input.x": x, "input.valid": torch.tensor(list(valid)), "upstream.out": U,
              "expected.out": res["out"], "expected.selected": res["selected"],
              "expected.router_logits": res["router_logits"], "expected.aux.total": res["aux"]["total"],
              "grad.input.x": gs[0]}
    for (k, v), g in zip(P.items(), gs[1:]):
        arrays["param." + k] = v
        arrays["grad.param." + k] = torch.zeros_like(v) if g is None else g
    arrays = {k: v.detach().numpy().copy() for k, v in arrays.items()}
    if mutate:
        mutate(arrays)
    man = {"format": "modref-golden", "version": version, "name": name, "kind": "layer",
           "config": {"batch": 2, "seq_len": 6, "layer": cfg},
           "loss": "sum(upstream.out * out) + aux.total",
           "arrays": [{"name": k, "dtype": a.dtype.str, "shape": list(a.shape)} for k, a in arrays.items()]}
    with open(os.path.join(d, name + ".json"), "w") as fh:
        json.dump(man, fh)
    np.savez(os.path.join(d, name + ".npz"), **arrays)


def run(args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = C.main(args)
    return rc, buf.getvalue()


class TestChecker(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_pass_and_summary_line(self):
        write_case(self.dir, "ok-case")
        rc, out = run([self.dir])
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS ok-case", out)
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 0 failed")

    def test_wrong_gradient_fails(self):
        def bump(a):
            a["grad.param.Wq"][1, 2] += 1e-4
        write_case(self.dir, "a-good")
        write_case(self.dir, "b-bad", bump)
        rc, out = run([self.dir])
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL b-bad", out)
        self.assertIn("grad.param.Wq", out)
        self.assertIn("[1, 2]", out)
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 1 failed")

    def test_routing_mismatch_is_named(self):
        def swap(a):
            a["expected.selected"][0, 0] = 5 if a["expected.selected"][0, 0] != 5 else 4
        write_case(self.dir, "routing", swap)
        rc, out = run([self.dir])
        self.assertEqual(rc, 1)
        self.assertIn("ROUTING", out)
        self.assertIn("torch-only", out)

    def test_padded_positions_are_not_judged_but_stored_as_zero(self):
        def junk_out(a):
            a["expected.out"][1, 5] = 123.0
        write_case(self.dir, "pad-ok", junk_out, valid=(6, 4))
        rc, out = run([self.dir])
        self.assertEqual(rc, 0, out)

        def junk_logit(a):
            a["expected.router_logits"][1, 5] = 0.5
        write_case(self.dir, "pad-bad", junk_logit, valid=(6, 4))
        rc, out = run([self.dir])
        self.assertEqual(rc, 1, out)
        self.assertIn("expected.router_logits@padding", out)
        self.assertIn("[1, 5]", out)

    def test_unknown_version_is_bad_input(self):
        write_case(self.dir, "v2", version=2)
        rc, out = run([self.dir])
        self.assertEqual(rc, 2)
        self.assertIn("unknown format version 2", out)

    def test_corrupt_npz_is_bad_input(self):
        write_case(self.dir, "corrupt")
        with open(os.path.join(self.dir, "corrupt.npz"), "r+b") as fh:
            fh.truncate(100)
        rc, out = run([self.dir])
        self.assertEqual(rc, 2)
        self.assertIn("corrupt.npz", out)

    def test_bad_json_and_missing_path(self):
        with open(os.path.join(self.dir, "junk.json"), "w") as fh:
            fh.write("{not json")
        rc, out = run([self.dir])
        self.assertEqual(rc, 2)
        self.assertIn("junk.json", out)
        rc, out = run([os.path.join(self.dir, "nowhere")])
        self.assertEqual(rc, 2)

    def test_deviate_joined_with_plus(self):
        write_case(self.dir, "case")
        try:
            rc, out = run(["--deviate", "residual_twice+weight_mlp_only", self.dir])
            self.assertEqual(rc, 1, out)
            self.assertIn("planted in mod_torch: residual_twice+weight_mlp_only", out)
            self.assertIn("FAIL case", out)
            M.DEVIATION = None
            rc, out = run(["--deviate", "residual_twice+nope", self.dir])
            self.assertEqual(rc, 2, out)
            self.assertIn("unknown deviation 'nope'", out)
        finally:
            M.DEVIATION = None

    def test_loss_formula(self):
        v = {"upstream.out": torch.ones(2), "out": torch.tensor([2.0, 3.0]), "aux.total": torch.tensor(0.5)}
        loss, _ = C.eval_loss("sum(upstream.out * out) + aux.total", v)
        self.assertEqual(float(loss), 5.5)
        cfg = {"layers": [{"routed": False}, {"routed": True}, {"routed": True}]}
        self.assertEqual(C.expand_formula("ce + sum over routed layers of L<l>.aux.total", cfg),
                         "ce + (L1.aux.total + L2.aux.total)")
        with self.assertRaises(C.BadInput):
            C.eval_loss("sum(nothing)", v)


if __name__ == "__main__":
    unittest.main()


def write_mode_case(d, name, mutate=None):
    """A staged MoDE case (docs/spec.md §14) whose expected values are mod_torch's own."""
    from test_mod_torch import mode_cfg, mode_params
    gen = torch.Generator().manual_seed(13)
    cfg = mode_cfg(experts=3, expert_capacity=0.5)
    P = mode_params(cfg, gen)
    x = torch.randn(2, 8, 8, generator=gen)
    U = torch.randn(2, 8, 8, generator=gen)
    leaves = [x] + list(P.values())
    for t in leaves:
        t.requires_grad_(True)
    res = M.mode_layer(x, P, cfg)
    gs = torch.autograd.grad((U * res["out"]).sum(), leaves, allow_unused=True)
    arrays = {"input.x": x, "upstream.out": U, "expected.out": res["out"],
              "expected.router_logits": res["router_logits"], "expected.selected": res["selected"],
              "expected.gates": res["gates"], "expected.expert_choice": res["expert_choice"],
              "grad.input.x": gs[0]}
    for (k, v), g in zip(P.items(), gs[1:]):
        arrays["param." + k] = v
        arrays["grad.param." + k] = torch.zeros_like(v) if g is None else g
    arrays = {k: v.detach().numpy().copy() for k, v in arrays.items()}
    if mutate:
        mutate(arrays)
    man = {"format": "modref-golden", "version": 1, "name": name, "kind": "mode",
           "config": {"batch": 2, "seq_len": 8, "mode": cfg},
           "loss": "sum(upstream.out * out)",
           "arrays": [{"name": k, "dtype": a.dtype.str, "shape": list(a.shape)} for k, a in arrays.items()]}
    with open(os.path.join(d, name + ".json"), "w") as fh:
        json.dump(man, fh)
    np.savez(os.path.join(d, name + ".npz"), **arrays)


class TestModeCases(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_mode_case_passes_and_a_changed_choice_fails(self):
        def move(a):
            a["expected.expert_choice"][0, 0, 0] = (a["expected.expert_choice"][0, 0, 0] + 1) % 8
        write_mode_case(self.dir, "a-mode")
        write_mode_case(self.dir, "b-mode-moved", move)
        rc, out = run([self.dir])
        self.assertEqual(rc, 1, out)
        self.assertIn("PASS a-mode", out)
        self.assertIn("FAIL b-mode-moved", out)
        self.assertIn("expected.expert_choice", out)

    def test_ungated_deviation_fails_the_mode_case(self):
        write_mode_case(self.dir, "mode")
        try:
            rc, out = run(["--deviate", "mode_ungated_experts", self.dir])
        finally:
            M.DEVIATION = None
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL mode", out)
