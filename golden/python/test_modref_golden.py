"""Tests of modref_golden.py (NumPy; the torch test runs when torch is installed)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modref_golden as mg  # noqa: E402

CORPUS = os.path.join(HERE, os.pardir, "corpus")

try:
    import torch
except ImportError:  # the helper must work without torch
    torch = None


def expected_candidate(case):
    """The case's own expected values under their candidate names: a perfect candidate."""
    return {mg.candidate_name(n): case.arrays[n] for n in case.arrays
            if mg.candidate_name(n) in case.outputs}


def write_case(d, name="tiny", version=1, mutate=None):
    """A two-array synthetic case: input.x and expected.out, plus a scalar and an int array."""
    arrays = {"input.x": np.arange(6.0).reshape(2, 3), "param.W": np.ones((3, 3)),
              "expected.out": np.arange(6.0).reshape(2, 3), "expected.loss": np.array(1.5),
              "expected.selected": np.array([[0, 2], [1, -1]], dtype=np.int64),
              "grad.param.W": np.zeros((3, 3))}
    roles = {"input": "input", "param": "param", "expected": "expected", "grad": "expected"}
    man = {"format": "modref-golden", "version": version, "name": name, "kind": "layer",
           "config": {"batch": 2, "seq_len": 3}, "loss": "sum(upstream.out * out)",
           "arrays": [{"name": k, "role": roles[k.split(".")[0]], "dtype": a.dtype.str, "shape": list(a.shape)}
                      for k, a in arrays.items()]}
    if mutate:
        mutate(man, arrays)
    with open(os.path.join(d, name + ".json"), "w") as fh:
        json.dump(man, fh)
    np.savez(os.path.join(d, name + ".npz"), **arrays)
    return os.path.join(d, name + ".json")


class TestLoad(unittest.TestCase):
    def test_corpus_case_by_path_dir_and_name(self):
        by_path = mg.load_case(os.path.join(CORPUS, "layer-paper.json"))
        by_dir = mg.load_case(CORPUS, "layer-paper")
        by_name = mg.load_case("layer-paper")
        for c in (by_path, by_dir, by_name):
            self.assertEqual(c.name, "layer-paper")
            self.assertEqual(c.kind, "layer")
            self.assertEqual(c.inputs["x"].shape, (2, 8, 8))
            self.assertEqual(c.params["Wq"].shape, (8, 8))
            self.assertEqual(c.upstream["out"].shape, (2, 8, 8))
            self.assertEqual(c.loss, "sum(upstream.out * out) + aux.total")
        c = by_path
        self.assertEqual(c.outputs["out"], ((2, 8, 8), "float"))
        self.assertEqual(c.outputs["selected"], ((2, 4), "int"))
        self.assertEqual(c.outputs["loss"], ((), "float"))
        self.assertEqual(c.outputs["grad.param.Router"], ((8,), "float"))
        self.assertNotIn("expected.out", c.outputs)
        self.assertEqual(len(c.outputs), 18)

    def test_model_case_names(self):
        c = mg.load_case("model-every-other")
        self.assertIn("tokens", c.inputs)
        self.assertIn("Embed", c.params)
        self.assertTrue(any(n.startswith("L0.") for n in c.params))
        self.assertIn("logits", c.outputs)
        self.assertEqual(c.upstream, {})


class TestReadErrors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def assertBad(self, path, *words):
        with self.assertRaises(mg.BadInput) as cm:
            mg.load_case(path)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_version(self):
        self.assertBad(write_case(self.dir, version=2), "version 2")

    def test_missing_file(self):
        self.assertBad(os.path.join(self.dir, "nope.json"), "nope.json", "cannot read manifest")

    def test_missing_array(self):
        def drop(man, arrays):
            del arrays["param.W"]
        self.assertBad(write_case(self.dir, mutate=drop), "'param.W'", "missing")

    def test_case_handed_by_fuzz_has_no_answer(self):
        # modref fuzz hands a candidate the case without its expected arrays;
        # the manifest still lists them, so the outputs to write are known.
        def strip(man, arrays):
            for k in [k for k in arrays if k.startswith(("expected.", "grad."))]:
                del arrays[k]
        case = mg.load_case(write_case(self.dir, mutate=strip))
        self.assertEqual(sorted(case.arrays), ["input.x", "param.W"])
        self.assertEqual(case.outputs, {"out": ((2, 3), "float"), "loss": ((), "float"),
                                        "selected": ((2, 2), "int"), "grad.param.W": ((3, 3), "float")})

    def test_wrong_shape(self):
        def reshape(man, arrays):
            arrays["input.x"] = arrays["input.x"].reshape(3, 2)
        self.assertBad(write_case(self.dir, mutate=reshape), "'input.x'", "[3, 2]", "[2, 3]")

    def test_truncated_npz(self):
        p = write_case(self.dir)
        npz = p[:-5] + ".npz"
        with open(npz, "rb") as fh:
            data = fh.read()
        with open(npz, "wb") as fh:
            fh.write(data[:len(data) // 2])
        self.assertBad(p, "cannot read arrays")


class TestWriteCandidate(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.case = mg.load_case(write_case(self.dir))
        self.good = expected_candidate(self.case)
        self.out = os.path.join(self.dir, "cand.npz")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def refused(self, values, *words):
        with open(self.out, "wb") as fh:
            fh.write(b"previous")
        with self.assertRaises(mg.CandidateError) as cm:
            mg.write_candidate(self.case, self.out, values)
        for w in words:
            self.assertIn(w, str(cm.exception))
        with open(self.out, "rb") as fh:
            self.assertEqual(fh.read(), b"previous", "a refused candidate must not touch the file")
        self.assertEqual(sorted(os.listdir(self.dir)), ["cand.npz", "tiny.json", "tiny.npz"])

    def test_round_trip_keeps_names_shapes_dtypes(self):
        vals = dict(self.good, out=self.good["out"].astype(np.float32),
                    selected=self.good["selected"].astype(np.int32), loss=1.5)
        mg.write_candidate(self.case, self.out, vals)
        with np.load(self.out) as z:
            self.assertEqual(sorted(z.files), ["grad.param.W", "loss", "out", "selected"])
            self.assertEqual(z["out"].dtype, np.float32)
            self.assertEqual(z["selected"].dtype, np.int32)
            self.assertEqual(z["loss"].shape, ())  # a scalar stays 0-d
            self.assertEqual(float(z["loss"]), 1.5)
            np.testing.assert_array_equal(z["selected"], [[0, 2], [1, -1]])

    def test_unknown_name_suggests_the_near_one(self):
        vals = dict(self.good)
        vals["outt"] = vals.pop("out")
        self.refused(vals, "'outt'", "did you mean 'out'")

    def test_selection_of_another_width_is_written(self):
        vals = dict(self.good)
        vals["selected"] = np.array([[0], [1]], dtype=np.int64)
        arrays = mg.check_candidate(self.case, vals)
        self.assertEqual(arrays["selected"].shape, (2, 1))
        vals["selected"] = np.array([0, 1], dtype=np.int64)
        self.refused(vals, "'selected'", "[2]", "[2, 2]")

    def test_missing_array_named_with_shape(self):
        vals = dict(self.good)
        del vals["grad.param.W"]
        self.refused(vals, "missing 'grad.param.W' (shape [3, 3])")

    def test_allow_missing(self):
        mg.write_candidate(self.case, self.out, {"out": self.good["out"]}, allow_missing=True)
        with np.load(self.out) as z:
            self.assertEqual(z.files, ["out"])

    def test_wrong_shape(self):
        self.refused(dict(self.good, out=np.zeros((3, 2))), "'out'", "shape [3, 2], want [2, 3]")

    def test_scalar_of_shape_one(self):
        self.refused(dict(self.good, loss=np.array([1.5])), "'loss'", "shape [1], want []")

    def test_float_where_integers_are_judged(self):
        self.refused(dict(self.good, selected=self.good["selected"].astype(np.float64)),
                     "'selected'", "float64", "int32 or int64")

    def test_half_precision(self):
        self.refused(dict(self.good, out=self.good["out"].astype(np.float16)), "'out'", "float16")

    def test_nan_and_inf_named_with_index(self):
        bad = self.good["out"].copy()
        bad[1, 2] = np.nan
        self.refused(dict(self.good, out=bad), "'out'", "nan", "[1, 2]")
        bad[1, 2] = -np.inf
        self.refused(dict(self.good, out=bad), "'out'", "-inf", "[1, 2]")

    def test_the_real_case_accepts_its_own_answer(self):
        case = mg.load_case("layer-paper")
        mg.write_candidate(case, self.out, expected_candidate(case))
        with np.load(self.out) as z:
            self.assertEqual(len(z.files), 18)

    def test_real_case_edges(self):
        # As modref check: a narrower `selected` (k - 1 tokens), 0/1 integer
        # targets, and aux.total left out where the configuration makes it 0.
        case = mg.load_case("layer-paper")
        vals = expected_candidate(case)
        vals["selected"] = vals["selected"][:, :-1]
        vals["targets"] = vals["targets"].astype(np.int64)
        del vals["aux.total"]
        mg.write_candidate(case, self.out, vals)
        with np.load(self.out) as z:
            self.assertEqual(z["selected"].shape[1], case.outputs["selected"][0][1] - 1)
            self.assertEqual(z["targets"].dtype, np.float64)
            self.assertNotIn("aux.total", z.files)
        vals["targets"][0, 0] = 2
        with self.assertRaises(mg.CandidateError):
            mg.write_candidate(case, self.out, vals)
        bce = mg.load_case("layer-router-bce")
        vals = expected_candidate(bce)
        del vals["aux.total"]
        with self.assertRaises(mg.CandidateError):
            mg.write_candidate(bce, self.out, vals)

    def test_optional_arrays(self):
        # As modref check: a layer's weights and multipliers may be left out, and
        # its targets where no loss reads them (layer-paper: no auxiliary loss).
        case = mg.load_case("layer-paper")
        vals = expected_candidate(case)
        for k in ("weights", "multipliers", "targets"):
            del vals[k]
        mg.write_candidate(case, self.out, vals)
        bce = mg.load_case("layer-router-bce")
        vals = expected_candidate(bce)
        del vals["targets"]
        with self.assertRaises(mg.CandidateError):
            mg.write_candidate(bce, self.out, vals)

    def test_model_layer_arrays_are_optional(self):
        # A model case's per-layer arrays (L<l>.weights, .multipliers, .targets,
        # .out) are written when the candidate has them and may be left out; the
        # per-layer arrays a model case always judged may not.
        case = mg.load_case("model-every-other")
        stages = [k for k in case.outputs if re.match(r"L\d+\.(weights|multipliers|targets|out)$", k)]
        self.assertEqual(len(stages), 4 * len([k for k in case.outputs if k.endswith(".selected")]))
        vals = expected_candidate(case)
        mg.write_candidate(case, self.out, vals)
        with np.load(self.out) as z:
            self.assertTrue(set(stages) <= set(z.files))
        for k in stages:
            del vals[k]
        mg.write_candidate(case, self.out, vals)
        with np.load(self.out) as z:
            self.assertFalse(set(stages) & set(z.files))
        del vals["L2.router_logits"]
        with self.assertRaises(mg.CandidateError):
            mg.write_candidate(case, self.out, vals)

    def test_works_without_torch(self):
        script = ("import sys; sys.modules['torch'] = None\n"  # any 'import torch' now fails
                  "sys.path.insert(0, %r)\n"
                  "import modref_golden as mg\n"
                  "c = mg.load_case('layer-paper')\n"
                  "mg.write_candidate(c, %r, {mg.candidate_name(n): c.arrays[n] for n in c.arrays\n"
                  "                           if mg.candidate_name(n) in c.outputs})\n") % (HERE, self.out)
        subprocess.run([sys.executable, "-c", script], check=True)
        with np.load(self.out) as z:
            self.assertEqual(len(z.files), 18)

    @unittest.skipIf(torch is None, "torch is not installed; the helper itself does not need it")
    def test_torch_tensors(self):
        vals = dict(self.good, out=torch.tensor(self.good["out"], requires_grad=True) * 1.0,
                    loss=torch.tensor(1.5))
        mg.write_candidate(self.case, self.out, vals)
        with np.load(self.out) as z:
            np.testing.assert_array_equal(z["out"], self.good["out"])
            self.assertEqual(z["loss"].shape, ())


class TestCreatesItsFolder(unittest.TestCase):
    def test_missing_folders_are_made(self):
        d = tempfile.mkdtemp()
        try:
            case = mg.load_case(write_case(d))
            out = os.path.join(d, "new", "deeper", "cand.npz")
            mg.write_candidate(case, out, expected_candidate(case))
            with np.load(out) as z:
                self.assertEqual(sorted(z.files), sorted(case.outputs))
        finally:
            shutil.rmtree(d)


# A stand-in for the modref command: it records its arguments and answers as
# FAKE_CHECK (the exit status of check) says; list prints a table.
FAKE_MODREF = """#!%s
import os, sys
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
cmd = sys.argv[1]
if cmd == "list":
    if "nothing-*" in sys.argv:
        sys.stderr.write('modref list: no such case "nothing-*"\\n'); sys.exit(2)
    print("case         kind   what it tests")
    print("layer-paper  layer  The paper's routed layer (Eq. 1)")
    print("tiny         layer  A small one")
elif cmd == "check":
    code = int(os.environ["FAKE_CHECK"])
    print("TABLE OF CHECK" if code != 2 else "")
    sys.stderr.write("BAD INPUT\\n" if code == 2 else "")
    sys.exit(code)
elif cmd == "diagnose":
    print("verdict: the candidate matches residual_twice"); sys.exit(1)
"""


class TestJudgeWithModref(unittest.TestCase):
    """list_cases, judge and run_case against a stand-in modref (CI runs the
    real one under pytest: golden/torch/pytest_corpus.py)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.modref = os.path.join(self.dir, "modref")
        with open(self.modref, "w") as fh:
            fh.write(FAKE_MODREF % sys.executable)
        os.chmod(self.modref, 0o755)
        self.log = os.path.join(self.dir, "log")
        os.environ["FAKE_LOG"] = self.log

    def tearDown(self):
        shutil.rmtree(self.dir)
        os.environ.pop("FAKE_LOG", None)
        os.environ.pop("FAKE_CHECK", None)

    def calls(self):
        with open(self.log) as fh:
            return fh.read().splitlines()

    def test_list_cases_passes_patterns_and_reads_names(self):
        self.assertEqual(mg.list_cases("layer-*", "tiny", modref=self.modref, corpus="C"), ["layer-paper", "tiny"])
        self.assertEqual(self.calls(), ["list --corpus C layer-* tiny"])
        with self.assertRaises(mg.ModrefError) as cm:
            mg.list_cases("nothing-*", modref=self.modref)
        self.assertIn('no such case "nothing-*"', str(cm.exception))

    def test_missing_modref_says_how_to_install(self):
        with self.assertRaises(mg.ModrefError) as cm:
            mg.list_cases(modref=os.path.join(self.dir, "absent"))
        self.assertIn("go install ./cmd/modref", str(cm.exception))

    def test_judge_pass_mismatch_and_bad_input(self):
        os.environ["FAKE_CHECK"] = "0"
        self.assertEqual(mg.judge("tiny", "c.npz", self.modref, "C"), (True, "TABLE OF CHECK\n"))
        self.assertEqual(self.calls(), ["check --corpus C --candidate c.npz tiny"])
        os.environ["FAKE_CHECK"] = "1"
        passed, report = mg.judge("tiny", "c.npz", self.modref)
        self.assertFalse(passed)
        self.assertIn("TABLE OF CHECK", report)
        self.assertIn("verdict: the candidate matches residual_twice", report)
        self.assertEqual(self.calls()[-1], "diagnose --candidate c.npz tiny")
        os.environ["FAKE_CHECK"] = "2"
        with self.assertRaises(mg.ModrefError) as cm:
            mg.judge("tiny", "c.npz", self.modref)
        self.assertIn("BAD INPUT", str(cm.exception))

    def test_run_case_writes_into_a_new_folder_and_judges_it(self):
        write_case(self.dir)
        os.environ["FAKE_CHECK"] = "0"
        out = os.path.join(self.dir, "cands")
        passed, _ = mg.run_case(expected_candidate, "tiny", out, self.modref, self.dir)
        self.assertTrue(passed)
        self.assertTrue(os.path.isfile(os.path.join(out, "tiny.npz")))
        self.assertEqual(self.calls(), ["check --corpus %s --candidate %s tiny" % (self.dir, os.path.join(out, "tiny.npz"))])


def rope(x, pos, base, interleaved):
    """RoPE of x (n x heads x dh) at positions pos: rotate-half (j with j + dh/2)
    or interleaved (2j with 2j+1), the j-th pair turning by pos * base**(-2j/dh)."""
    dh = x.shape[-1]
    ang = pos[:, None] * base ** (-2.0 * np.arange(dh // 2) / dh)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :dh // 2], x[..., dh // 2:])
    ra, rb = a * cos - b * sin, b * cos + a * sin
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., :dh // 2], out[..., dh // 2:] = ra, rb
    return out


class TestInterleavedRoPE(unittest.TestCase):
    def test_the_scores_of_the_case(self):
        # The Wq and Wk of layer-paper and of layer-gqa (whose Wk has kv_heads
        # heads, grouped-query attention), loaded through to_interleaved_rope
        # into an implementation with interleaved RoPE, give the case's
        # attention scores.
        for name in ("layer-paper", "layer-gqa"):
            with self.subTest(case=name):
                self.check_scores(mg.load_case(name))

    def check_scores(self, case):
        blk = case.config["layer"]
        heads, base = int(blk["heads"]), float(blk.get("rope_base", 10000))
        kv = int(blk.get("kv_heads", heads))
        x = case.inputs["x"][0]
        n, d = x.shape
        pos = np.arange(n, dtype=np.float64)

        def scores(wq, wk, interleaved):
            q = rope((x @ wq).reshape(n, heads, -1), pos, base, interleaved)
            k = rope((x @ wk).reshape(n, kv, -1), pos, base, interleaved)
            return np.einsum("ihd,jhd->hij", q, np.repeat(k, heads // kv, axis=1))

        want = scores(case.params["Wq"], case.params["Wk"], False)
        got = scores(mg.to_interleaved_rope(case.params["Wq"], heads), mg.to_interleaved_rope(case.params["Wk"], kv), True)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        wrong = scores(case.params["Wq"], case.params["Wk"], True)
        self.assertGreater(np.abs(wrong - want).max(), 1e-3, "the case's weights as they are must not give the scores")

    def test_gradients_map_back(self):
        # W' = to(W) reindexes columns, so for L = sum(A * W') the gradient in the
        # case's layout is from(A); and from undoes to.
        rng = np.random.default_rng(1)
        w, a = rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
        np.testing.assert_array_equal(mg.from_interleaved_rope(mg.to_interleaved_rope(w, 2), 2), w)
        e = np.zeros((8, 8))
        e[3, 5] = 1.0
        loss = lambda w: float((a * mg.to_interleaved_rope(w, 2)).sum())  # noqa: E731
        self.assertAlmostEqual(loss(w + e) - loss(w), mg.from_interleaved_rope(a, 2)[3, 5], places=12)
        with self.assertRaises(ValueError):
            mg.to_interleaved_rope(np.zeros((4, 6)), 2)   # heads of width 3


class TestWorkflowDoc(unittest.TestCase):
    def test_the_doc_shows_the_example_verbatim(self):
        with open(os.path.join(HERE, "example_layer.py")) as fh:
            example = fh.read()
        with open(os.path.join(HERE, os.pardir, os.pardir, "docs", "workflow.md")) as fh:
            doc = fh.read()
        self.assertIn("```python\n" + example + "```\n", doc,
                      "docs/workflow.md must show golden/python/example_layer.py verbatim; copy it again")


if __name__ == "__main__":
    unittest.main()
