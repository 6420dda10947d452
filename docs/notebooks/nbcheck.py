"""Checks a freshly executed notebook against its committed copy.

Usage: python3 nbcheck.py [COMMITTED.ipynb] FRESH.ipynb

Fails (exit 1, one line per problem) when
  - the fresh execution wrote anything to stderr or reported an error: GoNB
    v0.11.1 marks only a compile error as a failed cell; a panic (a failed
    assertion) or a failing shell command shows up as stderr text;
  - a code cell's outputs differ from the committed ones after normalising
    (only when COMMITTED.ipynb is given; run.sh --update checks the fresh
    execution alone before it replaces the committed outputs).

What is compared, per code cell: the stdout text (all stream chunks joined,
since GoNB may split them anywhere), and the sequence of rich outputs, each
as its MIME types plus its text/plain, text/markdown and text/html content.
Images (image/png, image/svg+xml) are compared by MIME type only: their
bytes depend on the plotting library's rasteriser and fonts, and the numbers
behind them are printed and compared as text.

Normalising rule (the documented exceptions, README.md "Checked outputs"):
  - a Go time.Duration as printed by its String method (1.5s, 250ms, 3m2.1s,
    12µs) becomes <duration>;
  - GoNB's per-kernel temporary directory (/tmp/gonb_<hex>) becomes
    <gonb-tmp>.
Nothing else varies: modref is deterministic (same inputs, same bits), so
every other number must match exactly.
"""

import re
import sys

import nbformat

DURATION = re.compile(
    r"(?<![\w.])(\d+(\.\d+)?(h|m|s|ms|µs|us|ns))+(?![\w])")
GONB_TMP = re.compile(r"/tmp/gonb_[0-9a-f]+")
TEXT_TYPES = ("text/plain", "text/markdown", "text/html")


def normalise(text):
    """Applies the normalising rule to one output text."""
    return GONB_TMP.sub("<gonb-tmp>", DURATION.sub("<duration>", text))


def joined(value):
    """Returns a notebook text field, stored as a string or a list of lines, as one string."""
    return "".join(value) if isinstance(value, list) else value


def summary(cell):
    """Returns (stdout, rich, problems) for one executed code cell: its normalised
    stdout text, its rich outputs (MIME types, text contents) in order, and its
    stderr and error outputs."""
    stdout, rich, problems = [], [], []
    for out in cell.get("outputs", []):
        kind = out["output_type"]
        if kind == "stream" and out["name"] == "stdout":
            stdout.append(joined(out["text"]))
        elif kind == "stream":
            problems.append("stderr: " + joined(out["text"]).strip())
        elif kind == "error":
            problems.append("error: %s: %s" % (out.get("ename"), out.get("evalue")))
        else:
            data = out.get("data", {})
            texts = tuple((t, normalise(joined(data[t]))) for t in TEXT_TYPES if t in data)
            rich.append((tuple(sorted(data)), texts))
    return normalise("".join(stdout)), rich, problems


def first_difference(a, b):
    """Describes where two texts first differ, by line."""
    la, lb = a.splitlines(), b.splitlines()
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else "<missing>"
        y = lb[i] if i < len(lb) else "<missing>"
        if x != y:
            return "line %d: committed %r, fresh %r" % (i + 1, x, y)
    return "same lines, different line endings"


def errors(fresh_path):
    """Lists the stderr and error outputs of an executed notebook."""
    fresh = nbformat.read(fresh_path, as_version=4)
    problems = []
    for n, cell in enumerate((c for c in fresh.cells if c.cell_type == "code"), 1):
        where = "code cell %d (%s)" % (n, cell.source.splitlines()[0] if cell.source else "empty")
        problems += ["%s: %s" % (where, p) for p in summary(cell)[2]]
    return problems


def check(committed_path, fresh_path):
    """Lists the problems of a fresh execution and its differences from the committed copy."""
    committed = nbformat.read(committed_path, as_version=4)
    fresh = nbformat.read(fresh_path, as_version=4)
    problems = []
    code_c = [c for c in committed.cells if c.cell_type == "code"]
    code_f = [c for c in fresh.cells if c.cell_type == "code"]
    if len(code_c) != len(code_f):
        return ["%d code cells committed, %d executed" % (len(code_c), len(code_f))]
    for n, (cc, cf) in enumerate(zip(code_c, code_f), 1):
        where = "code cell %d (%s)" % (n, cf.source.splitlines()[0] if cf.source else "empty")
        out_c, rich_c, bad_c = summary(cc)
        out_f, rich_f, bad_f = summary(cf)
        problems += ["%s: fresh %s" % (where, p) for p in bad_f]
        problems += ["%s: committed %s" % (where, p) for p in bad_c]
        if out_c != out_f:
            problems.append("%s: stdout differs, %s" % (where, first_difference(out_c, out_f)))
        if rich_c != rich_f:
            problems.append("%s: display outputs differ: committed %d %s, fresh %d %s" % (
                where, len(rich_c), [r[0] for r in rich_c], len(rich_f), [r[0] for r in rich_f]))
            for (tc, xc), (tf, xf) in zip(rich_c, rich_f):
                if xc != xf:
                    problems.append("%s:   %s" % (where, first_difference(str(xc), str(xf))))
    return problems


def main():
    if len(sys.argv) == 2:
        problems = errors(sys.argv[1])
    elif len(sys.argv) == 3:
        problems = check(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: nbcheck.py [COMMITTED.ipynb] FRESH.ipynb")
    for p in problems:
        print("%s: %s" % (sys.argv[1], p))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
