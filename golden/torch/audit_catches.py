#!/usr/bin/python3
"""Audit the corpus' "catches" claims with the independent PyTorch implementation.

Usage: /usr/bin/python3 golden/torch/audit_catches.py [DIR] [--convention KEY=VALUE ...]

For each deviation of docs/spec.md §11, plant it in mod_torch, run every case,
and compare the cases that fail with the cases whose manifest lists the deviation
in "catches". A case that claims a deviation but passes under it is reported as
an OVERCLAIM (exit 1); a case that fails without claiming it is listed as
"also caught" (harmless, informative).
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_corpus as C  # noqa: E402
import mod_torch as M  # noqa: E402


def main(argv):
    args = []
    it = iter(argv)
    for a in it:
        if a == "--convention":
            k, _, v = next(it, "").partition("=")
            if k not in M.CONVENTIONS:
                print("bad usage: unknown convention %r" % k)
                return 2
            M.CONVENTIONS[k] = v
        else:
            args.append(a)
    try:
        cases = C.find_cases(args)
    except C.BadInput as e:
        print("bad input: %s" % e)
        return 2
    loaded = []
    for p in cases:
        try:
            man, arrays = C.load_case(p)
        except C.BadInput as e:
            print("bad input: %s" % e)
            return 2
        loaded.append((man, arrays))

    def failing():
        out = set()
        for man, arrays in loaded:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    values, grads, info = C.run_case(man, arrays)
                    ok, _ = C.compare(man, arrays, values, grads, info)
            except Exception:
                ok = False
            if not ok:
                out.add(man["name"])
        return out

    M.DEVIATION = None
    base = failing()
    if base:
        print("note: without any deviation these cases already fail: %s" % ", ".join(sorted(base)))
    over = 0
    for dev in M.DEVIATIONS:
        M.DEVIATION = dev
        fail = failing() - base
        claim = {man["name"] for man, _ in loaded if dev in (man.get("catches") or [])}
        missed = sorted(claim - fail - base)
        extra = sorted(fail - claim)
        over += len(missed)
        print("%-24s claimed by %2d, caught by %2d%s%s" % (
            dev, len(claim), len(fail & claim),
            ("; OVERCLAIM (claimed, but passes under it): " + ", ".join(missed)) if missed else "",
            ("; also caught by: " + ", ".join(extra)) if extra else ""))
    M.DEVIATION = None
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
