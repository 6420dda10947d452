"""Tests of candidate.py's modes (--dtype) and fuzz_candidate.py --keep, the
correct implementations measure_tol.py fuzzes (run: /usr/bin/python3 -m unittest
discover golden/torch)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import candidate as T  # noqa: E402
import check_corpus as C  # noqa: E402
import measure_tol as MT  # noqa: E402
import mod_torch as M  # noqa: E402
import modref_golden as G  # noqa: E402

CORPUS = os.path.join(HERE, "..", "corpus")


def corpus_case(name):
    return G.Case(*C.load_case(os.path.join(CORPUS, name + ".json")))


class Restore(unittest.TestCase):
    """Puts back the module state candidate() sets."""

    def setUp(self):
        self.saved = (M.DTYPE, M.NATIVE, M.DEVIATION, M.FORMS, M.BUG, torch.get_default_dtype())

    def tearDown(self):
        M.DTYPE, M.NATIVE, M.DEVIATION, M.FORMS, M.BUG, dt = self.saved
        torch.set_default_dtype(dt)


class TestRounding(Restore):
    def test_round_fp16_to_nearest_even(self):
        t = torch.tensor([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -10, 65519.0, 65520.0, -70000.0],
                         dtype=torch.float32)
        got = T.round_fp16(t).tolist()
        self.assertEqual(got[:4], [1.0, 1 + 2.0 ** -9, 1 + 2.0 ** -10, 65504.0])
        self.assertEqual(got[4:], [float("inf"), float("-inf")])

    def test_fp16_products_round_operands_results_and_gradients(self):
        torch.set_default_dtype(torch.float32)
        g = torch.Generator().manual_seed(1)
        a = torch.randn(5, 7, generator=g, requires_grad=True)
        b = torch.randn(7, 3, generator=g, requires_grad=True)
        with T.fp16_products():
            y = a @ b
            y.backward(torch.randn(5, 3, generator=g))
        want = T.round_fp16(T.round_fp16(a.detach()) @ T.round_fp16(b.detach()))
        self.assertTrue(torch.equal(y, want), "fp16 product: %s != %s" % (y, want))
        for name, gr in (("a", a.grad), ("b", b.grad)):
            self.assertTrue(torch.equal(gr, T.round_fp16(gr)), "grad %s not fp16: %s" % (name, gr))
        self.assertFalse(torch.equal(y, a.detach() @ b.detach()))

    def test_tf32_products_keep_float32_results(self):
        torch.set_default_dtype(torch.float32)
        g = torch.Generator().manual_seed(2)
        a, b = torch.randn(4, 6, generator=g), torch.randn(6, 2, generator=g)
        with T.tf32_products():
            y = torch.einsum("ij,jk->ik", a, b)
        self.assertTrue(torch.equal(y, torch.einsum("ij,jk->ik", T.round_tf32(a), T.round_tf32(b))))
        self.assertFalse(torch.equal(y, T.round_tf32(y)), "tf32 mode rounded a result")


class TestNative(Restore):
    def test_native_layer_norm_and_cross_entropy_equal_the_formulas(self):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 5, 6, generator=g, dtype=torch.float64) * 3 + 1
        gamma, beta = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
        logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
        targets = torch.tensor([[0, 6, -1, 3, 2], [-1, -1, 1, 5, 4]])
        M.DTYPE, M.NATIVE = torch.float64, False
        ln, ce = M.layer_norm(x, gamma, beta, 1e-5), M.cross_entropy(logits, targets)
        M.NATIVE = True
        ln2, ce2 = M.layer_norm(x, gamma, beta, 1e-5), M.cross_entropy(logits, targets)
        self.assertLess(float((ln - ln2).abs().max()), 1e-12)
        self.assertLess(abs(float(ce - ce2)), 1e-12)
        self.assertGreater(float(ce), 0.5)

    def test_pure_bf16_rope_angles_in_float32(self):
        # at position 2047 an angle in bf16 is off by up to 4 radians; in float32 the
        # rotated vector is the float64 one to bf16's rounding of cos, sin and x
        x = torch.randn(3, 1, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
        pos = torch.tensor([5, 1000, 2047])
        M.DTYPE = torch.float64
        want = M.rope(x, pos, 10000.0)
        M.DTYPE = torch.bfloat16
        got = M.rope(x.to(torch.bfloat16), pos, 10000.0)
        self.assertEqual(got.dtype, torch.bfloat16)
        err = float((got.double() - want).abs().max() / want.abs().max())
        self.assertLess(err, 0.02, "bf16 rope off by %.3g of its scale" % err)


class TestModes(Restore):
    def test_every_mode_computes_a_corpus_case_near_float64(self):
        case = corpus_case("model-every-third")
        exact = T.candidate(case, "float64")
        # the worst relative error (against each array's scale) each mode may have:
        # 16-bit modes a few of their roundings, float32 modes far below
        bound = {"float32": 1e-4, "float32-native": 1e-4, "tf32": 2e-2, "fp16": 2e-2,
                 "bfloat16": 0.15, "bfloat16-pure": 0.3}
        for mode, b in bound.items():
            cand = T.candidate(case, mode)
            self.assertEqual(set(cand), set(exact), mode)
            for k, want in exact.items():
                got = cand[k]
                self.assertEqual(got.dtype, np.int64 if want.dtype.kind == "i" else np.float32, "%s %s" % (mode, k))
                if want.dtype.kind != "f":
                    continue
                scale = max(float(np.abs(want).max()), 1e-30)
                err = float(np.abs(got.astype(np.float64) - want).max()) / scale
                self.assertLess(err, b, "%s: %s off by %.3g of its scale %.3g" % (mode, k, err, scale))
            if mode == "bfloat16-pure":
                lg = cand["logits"]
                self.assertTrue(np.array_equal(lg, torch.from_numpy(lg).bfloat16().float().numpy()),
                                "pure bf16 logits are not bf16 values")
            if mode == "fp16":
                lg = cand["logits"]
                self.assertTrue(np.array_equal(lg, lg.astype(np.float16).astype(np.float32)),
                                "fp16 logits (the last product's output) are not fp16 values")


class TestKeep(unittest.TestCase):
    def test_server_keeps_each_case_and_its_candidate(self):
        man = os.path.join(CORPUS, "layer-paper.json")
        with tempfile.TemporaryDirectory() as tmp:
            keep = os.path.join(tmp, "keep")
            os.mkdir(keep)
            out = os.path.join(tmp, "out.npz")
            req = json.dumps({"id": 1, "manifest": man, "arrays": man[:-5] + ".npz", "out": out}) + "\n"
            p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_candidate.py"), "--dtype", "float32-native",
                                "--keep", keep], input=req, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn('"status": "ok"', p.stdout.splitlines()[-1])
            with open(os.path.join(keep, "layer-paper.json")) as f:
                self.assertEqual(json.load(f)["name"], "layer-paper")
            a, b = np.load(out), np.load(os.path.join(keep, "layer-paper.npz"))
            self.assertEqual(sorted(a.files), sorted(b.files))
            for k in a.files:
                self.assertTrue(np.array_equal(a[k], b[k]), k)

    def test_keep_wants_a_directory_and_the_server(self):
        for argv in (["--keep", ""], ["--keep", "/tmp", "a.json", "b.npz"], ["--dtype", "float16"]):
            p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_candidate.py")] + argv,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 2, "%s: %s" % (argv, p.stderr))


class TestJobs(Restore):
    def test_jobs_write_what_separate_calls_write_and_stop_at_a_failure(self):
        man = os.path.join(CORPUS, "layer-paper.json")
        with tempfile.TemporaryDirectory() as tmp:
            jobs = os.path.join(tmp, "jobs")
            with open(jobs, "w") as f:
                f.write("%s %s/a.npz --dtype float32 --deviate residual_twice\n\n" % (man, tmp))
                f.write("'%s' %s/b.npz --dtype float32 --form torch_topk --deviate gather_first_k\n" % (man, tmp))
            self.assertEqual(T.main(["--jobs", jobs]), 0)
            self.assertEqual(T.main([man, os.path.join(tmp, "a1.npz"), "--dtype", "float32", "--deviate", "residual_twice"]), 0)
            self.assertEqual(T.main([man, os.path.join(tmp, "b1.npz"), "--dtype", "float32", "--form", "torch_topk",
                                     "--deviate", "gather_first_k"]), 0)
            for job, single in (("a", "a1"), ("b", "b1")):
                a, b = np.load(os.path.join(tmp, job + ".npz")), np.load(os.path.join(tmp, single + ".npz"))
                self.assertEqual(sorted(a.files), sorted(b.files))
                for k in a.files:
                    self.assertTrue(np.array_equal(a[k], b[k]), "%s: %s" % (job, k))
            with open(jobs, "w") as f:
                f.write("%s %s/c.npz --deviate no_such_deviation\n%s %s/d.npz\n" % (man, tmp, man, tmp))
            self.assertEqual(T.main(["--jobs", jobs]), 2)
            self.assertFalse(os.path.exists(os.path.join(tmp, "d.npz")), "a job after a failing one ran")
            self.assertEqual(T.main(["--jobs", jobs, "extra"]), 2)
            self.assertEqual(T.main(["--jobs", os.path.join(tmp, "missing")]), 2)


class TestMeasure(unittest.TestCase):
    def test_ratio_is_error_over_tolerance_at_the_reported_element(self):
        tol = {"atol": 1e-3, "rtol": 1e-2}
        self.assertAlmostEqual(MT.ratio_of({"status": "fail", "got": 2.06, "want": 2.0, "tolerance": tol}), 0.06 / 0.021)
        self.assertEqual(MT.ratio_of({"status": "pass", "got": 1.0, "want": 1.0, "tolerance": {"atol": 0, "rtol": 0}}), 0.0)
        self.assertEqual(MT.ratio_of({"status": "missing"}), float("inf"))

    def test_worst_names_the_worst_array_and_a_routing_mismatch(self):
        tol = {"atol": 1.0, "rtol": 0.0}
        res = {"arrays": [{"name": "out", "status": "pass", "got": 0.5, "want": 0.0, "tolerance": tol},
                          {"name": "loss", "status": "fail", "got": 3.0, "want": 0.0, "tolerance": tol}]}
        self.assertEqual(MT.worst_of(res), (3.0, "loss"))
        res["arrays"].append({"name": "selected", "status": "fail", "routing": [{"row": 0}], "got": 1, "want": 1,
                              "tolerance": tol})
        self.assertEqual(MT.worst_of(res), (float("inf"), "selected (routing)"))


if __name__ == "__main__":
    unittest.main()
