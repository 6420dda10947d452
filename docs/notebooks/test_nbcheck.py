"""Tests of nbcheck.py: what it reports as a failure, and what it excuses.

Run: python3 -m unittest discover -s docs/notebooks
"""

import os
import tempfile
import unittest

import nbformat

import nbcheck


def notebook(*outputs):
    """A notebook with one code cell per list of outputs."""
    nb = nbformat.v4.new_notebook()
    for outs in outputs:
        cell = nbformat.v4.new_code_cell("%%\nfmt.Println(1)")
        cell.outputs = outs
        nb.cells.append(cell)
    return nb


def stdout(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def stderr(text):
    return nbformat.v4.new_output("stream", name="stderr", text=text)


def png(data="iVBORw0KGgo="):
    return nbformat.v4.new_output("display_data", data={"image/png": data})


def html(text):
    return nbformat.v4.new_output("display_data", data={"text/html": text})


class CheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, nb):
        path = os.path.join(self.dir.name, name)
        nbformat.write(nb, path)
        return path

    def problems(self, committed, fresh):
        return nbcheck.check(self.write("c.ipynb", committed), self.write("f.ipynb", fresh))

    def test_identical_outputs_pass(self):
        nb = notebook([stdout("k = 4\n"), html("<b>x</b>")], [png()])
        self.assertEqual(self.problems(nb, nb), [])

    def test_changed_number_fails_and_names_the_line(self):
        problems = self.problems(notebook([stdout("a\nk = 4\n")]), notebook([stdout("a\nk = 5\n")]))
        self.assertEqual(len(problems), 1)
        self.assertIn("line 2", problems[0])
        self.assertIn("'k = 5'", problems[0])

    def test_stream_chunks_are_joined(self):
        self.assertEqual(self.problems(notebook([stdout("k = 4\n")]),
                                       notebook([stdout("k ="), stdout(" 4\n")])), [])

    def test_stderr_fails_even_when_committed_too(self):
        panic = [stdout("x\n"), stderr("panic: check failed\nexit status 2\n")]
        problems = self.problems(notebook(panic), notebook(panic))
        self.assertTrue(any("fresh stderr: panic" in p for p in problems), problems)
        self.assertEqual(nbcheck.errors(self.write("f.ipynb", notebook(panic))),
                         ["code cell 1 (%%): stderr: panic: check failed\nexit status 2"])

    def test_durations_and_gonb_dirs_are_excused(self):
        a = notebook([stdout("256 steps in 18s, 238µs per byte, wrote /tmp/gonb_039ea713/x.npz\n")])
        b = notebook([stdout("256 steps in 1m2.5s, 12ms per byte, wrote /tmp/gonb_ffe01/x.npz\n")])
        self.assertEqual(self.problems(a, b), [])

    def test_numbers_with_units_that_are_not_durations_are_compared(self):
        for x, y in [("k = 4\n", "k = 5\n"), ("1.5e-3s\n", "1.6e-3s\n"), ("step 32:\n", "step 33:\n"),
                     ("0.29 → 28\n", "0.29 → 29\n")]:
            self.assertNotEqual(self.problems(notebook([stdout(x)]), notebook([stdout(y)])), [], (x, y))

    def test_images_compared_by_type_only(self):
        self.assertEqual(self.problems(notebook([png("AAAA")]), notebook([png("BBBB")])), [])
        self.assertNotEqual(self.problems(notebook([png()]), notebook([html("<b>x</b>")])), [])

    def test_html_text_is_compared(self):
        self.assertNotEqual(self.problems(notebook([html("<b>4</b>")]), notebook([html("<b>5</b>")])), [])

    def test_missing_output_fails(self):
        self.assertNotEqual(self.problems(notebook([png()]), notebook([])), [])
        self.assertNotEqual(self.problems(notebook([stdout("a\n")]), notebook([])), [])

    def test_cell_count_must_match(self):
        self.assertNotEqual(self.problems(notebook([], []), notebook([])), [])


if __name__ == "__main__":
    unittest.main()
