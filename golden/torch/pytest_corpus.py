"""The PyTorch implementation judged case by case under pytest, as a PyTorch
user's CI runs modref (golden/python/modref_golden.py, pytest_cases):

    go build -o /tmp/modref ./cmd/modref
    MODREF=/tmp/modref /usr/bin/python3 -m pytest golden/torch/pytest_corpus.py

runs mod_torch in float32 on every case (MODREF_CASES, space-separated
patterns of `modref list`, selects fewer), one test per case, each judged by
`modref check`. MODREF_DEVIATE=NAME plants a deviation of docs/spec.md §11,
so that the failures show check's table and diagnose's verdict naming it.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import candidate as T  # noqa: E402
import modref_golden as mg  # noqa: E402  (candidate puts golden/python on the path)


def run_case(case):
    return T.candidate(case, "float32", os.environ.get("MODREF_DEVIATE") or None)


test_modref = mg.pytest_cases(run_case, *os.environ.get("MODREF_CASES", "").split(),
                              modref=os.environ.get("MODREF", "modref"))
