"""The model and decode adapters that docs/workflow.md shows: shown verbatim, and they work."""

import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import example_decode  # noqa: E402
import example_model  # noqa: E402
import modref_golden as mg  # noqa: E402  (the examples put golden/python on the path)

CORPUS = os.path.join(HERE, os.pardir, "corpus")


class TestExamples(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_the_doc_shows_them_verbatim(self):
        with open(os.path.join(HERE, os.pardir, os.pardir, "docs", "workflow.md")) as fh:
            doc = fh.read()
        for name in ("example_model.py", "example_decode.py"):
            with open(os.path.join(HERE, name)) as fh:
                self.assertIn("```python\n" + fh.read() + "```\n", doc,
                              "docs/workflow.md must show golden/torch/%s verbatim; copy it again" % name)

    def check(self, module, name):
        out = os.path.join(self.dir, name + ".npz")
        module.main(os.path.join(CORPUS, name + ".json"), out)
        case = mg.load_case(CORPUS, name)
        with np.load(out) as z:
            self.assertEqual(sorted(z.files), sorted(case.outputs))
            for key in z.files:
                want = case.arrays["expected." + key] if not key.startswith("grad.") else case.arrays[key]
                np.testing.assert_allclose(z[key], want, rtol=1e-6, atol=1e-8, err_msg="%s %s" % (name, key))

    def test_model_adapter(self):
        self.check(example_model, "model-predictor")

    def test_decode_adapter(self):
        self.check(example_decode, "decode-router")


if __name__ == "__main__":
    unittest.main()
