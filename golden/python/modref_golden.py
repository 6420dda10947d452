"""Read a modref golden case and write a candidate for `modref check`.

One file, NumPy only (PyTorch tensors are accepted where arrays are, but torch
is never imported). Copy it into your repository or put this directory on
PYTHONPATH. The format is docs/golden-format.md; docs/workflow.md shows a
complete PyTorch example.

    import modref_golden as mg
    case = mg.load_case("golden/corpus/layer-paper.json")
    x = case.inputs["x"]              # input.x, B x S x d, float64
    wq = case.params["Wq"]            # param.Wq
    u = case.upstream["out"]          # upstream.out: the loss is sum(u * out) + aux.total
    ...                               # run your implementation
    mg.write_candidate(case, "out/layer-paper.npz", {"out": out, "grad.input.x": gx, ...})

write_candidate refuses, before writing anything, an array the case does not
judge, a missing one, a wrong shape, a dtype other than float32/float64
(int32/int64 for integer arrays such as `selected`), and NaN or Inf, with one
error that names the array and what was expected. It creates the folder it
writes into.

In a pytest suite, pytest_cases makes one test per case, judged by the
`modref` command; a failing test shows `modref check`'s table and
`modref diagnose`'s verdict:

    # test_mod.py
    import modref_golden as mg
    from mymod import compute_case   # compute_case(case) -> {"out": ..., "grad.input.x": ..., ...}
    test_modref = mg.pytest_cases(compute_case, "layer-*", "decode-*")

The patterns are those of `modref list PATTERN...` (globs or whole names;
none: every case). judge does the same without pytest.
"""

import atexit
import difflib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile

import numpy as np

FORMAT = "modref-golden"
VERSION = 1

# The corpus directory of the checkout this file lives in.
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "corpus")

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INTS = (np.dtype(np.int32), np.dtype(np.int64))


class BadInput(Exception):
    """A case that cannot be read: missing or malformed files, an unknown format version."""


class CandidateError(ValueError):
    """Candidate arrays that `modref check` would refuse as bad input."""


def read_case(manifest_path):
    """Returns (manifest, arrays) of the case whose manifest is manifest_path.

    The arrays are read from the .npz beside it; every array the manifest lists
    must be there with the listed shape and dtype, except the expected ones
    (expected.*, grad.*), which `modref fuzz` leaves out of the case it hands a
    candidate: a candidate computes them and never reads them.
    """
    try:
        with open(manifest_path, "rb") as fh:
            man = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput("%s: cannot read manifest: %s" % (manifest_path, e))
    if not isinstance(man, dict):
        raise BadInput("%s: manifest is not a JSON object" % manifest_path)
    if man.get("format") != FORMAT:
        raise BadInput("%s: format %r is not %s" % (manifest_path, man.get("format"), FORMAT))
    if man.get("version") != VERSION:
        raise BadInput("%s: unknown format version %r (this reader reads version %d)"
                       % (manifest_path, man.get("version"), VERSION))
    npz_path = manifest_path[:-len(".json")] + ".npz"
    try:
        with open(npz_path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise BadInput("%s: cannot read arrays: %s" % (npz_path, e))
    for spec in man.get("arrays", []):
        nm = spec.get("name")
        if nm not in arrays and _role(spec) == "expected":
            continue
        if nm not in arrays:
            raise BadInput("%s: array %r listed in the manifest is missing" % (npz_path, nm))
        if list(arrays[nm].shape) != list(spec.get("shape", [])):
            raise BadInput("%s: array %r has shape %s, manifest says %s"
                           % (npz_path, nm, list(arrays[nm].shape), spec.get("shape")))
        want = spec.get("dtype")
        if want is not None and arrays[nm].dtype != np.dtype(want):
            raise BadInput("%s: array %r has dtype %s, manifest says %s"
                           % (npz_path, nm, arrays[nm].dtype, want))
    return man, arrays


def _role(spec):
    """The role of a manifest's array entry (named by its prefix when not given)."""
    nm = spec.get("name") or ""
    return spec.get("role") or ("expected" if nm.startswith(("expected.", "grad.")) else "")


def _strip(prefix, arrays):
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def candidate_name(name):
    """The name a candidate uses for an expected array: without "expected."."""
    return name[len("expected."):] if name.startswith("expected.") else name


class Case:
    """One golden case: its manifest and arrays, sorted by role.

    name, kind, config, loss  the manifest's fields (loss is the formula whose
                              gradients the case holds)
    inputs                    input.* without the prefix: "x", "valid", "tokens", ...
    params                    param.* without the prefix: "Wq", "L1.Router", ...
    upstream                  upstream.* without the prefix ("out" in layer cases)
    outputs                   what a candidate must hold: candidate name ->
                              (shape, "float" or "int"), in manifest order
    manifest, arrays          everything, under the manifest's names
    """

    def __init__(self, manifest, arrays):
        self.manifest = manifest
        self.arrays = arrays
        self.name = manifest.get("name")
        self.kind = manifest.get("kind")
        self.config = manifest.get("config") or {}
        self.loss = manifest.get("loss")
        self.inputs = _strip("input.", arrays)
        self.params = _strip("param.", arrays)
        self.upstream = _strip("upstream.", arrays)
        self.outputs = {}
        for spec in manifest.get("arrays", []):
            nm = spec.get("name", "")
            if _role(spec) == "expected":
                dtype = spec["dtype"] if "dtype" in spec else arrays[nm].dtype
                shape = spec["shape"] if "shape" in spec else arrays[nm].shape
                kind = "int" if np.dtype(dtype).kind in "iu" else "float"
                self.outputs[candidate_name(nm)] = (tuple(shape), kind)

    def __repr__(self):
        return "Case(%r, kind=%r, %d outputs)" % (self.name, self.kind, len(self.outputs))


def load_case(path_or_dir, name=None):
    """Loads a case: load_case("DIR/NAME.json"), load_case(DIR, NAME), or load_case(NAME)
    for a case of the corpus beside this file (golden/corpus)."""
    if name is not None:
        path = os.path.join(path_or_dir, name + ".json")
    elif path_or_dir.endswith(".json"):
        path = path_or_dir
    else:
        path = os.path.join(DEFAULT_DIR, path_or_dir + ".json")
    return Case(*read_case(path))


def _as_array(v):
    if hasattr(v, "detach") and hasattr(v, "cpu"):  # a torch tensor, without importing torch
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def check_candidate(case, values, allow_missing=False):
    """Returns values as NumPy arrays after checking them against what case judges.

    values maps candidate names ("out", "selected", "aux.total", "grad.param.Wq", ...)
    to NumPy arrays, PyTorch tensors or Python numbers. Raises CandidateError naming
    the array: a name the case does not judge (with the nearest names), a missing
    array (unless allow_missing), a wrong shape (an integer position list such as
    selected may differ in its last dimension: that is a different number of
    selected tokens, which modref check judges), a dtype modref does not accept,
    or a NaN or infinite value.
    """
    known = list(case.outputs)
    out = {}
    for key, v in values.items():
        if key not in case.outputs:
            near = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
            raise CandidateError("case %s judges no array %r%s" % (
                case.name, key, "; did you mean %s?" % " or ".join(repr(n) for n in near) if near else
                "; it judges " + ", ".join(known)))
        shape, kind = case.outputs[key]
        a = _as_array(v)
        # A position list (selected) of another width is a selection of a
        # different number of tokens: modref judges and names it, so it is
        # written as it is. Every other shape must match.
        other_width = kind == "int" and a.ndim == len(shape) >= 1 and a.shape[:-1] == tuple(shape[:-1])
        # A 0/1 integer `targets` is the float mask it stands for.
        if kind == "float" and key.endswith("targets") and a.dtype in _INTS and np.isin(a, (0, 1)).all():
            a = a.astype(np.float64)
        if a.shape != shape and not other_width:
            raise CandidateError("case %s: array %r has shape %s, want %s"
                                 % (case.name, key, list(a.shape), list(shape)))
        if kind == "int":
            if a.dtype not in _INTS:
                raise CandidateError("case %s: array %r has dtype %s, want int32 or int64 (positions, "
                                     "padded with -1)" % (case.name, key, a.dtype))
        else:
            if a.dtype not in _FLOATS:
                raise CandidateError("case %s: array %r has dtype %s, want float32 or float64"
                                     % (case.name, key, a.dtype))
            bad = ~np.isfinite(a)
            if bad.any():
                at = [int(i) for i in np.argwhere(bad)[0]]
                raise CandidateError("case %s: array %r has %s at %s" % (case.name, key, a[tuple(at)], at))
        out[key] = np.array(a, order="C")  # not ascontiguousarray, which makes a scalar 1-d
    missing = [k for k in known if k not in out and not zero_by_configuration(case, k) and not optional(case, k)]
    if missing and not allow_missing:
        raise CandidateError("case %s: missing %s; a candidate holds all %d arrays the case judges" % (
            case.name, ", ".join("%r (shape %s)" % (k, list(case.outputs[k][0])) for k in missing), len(known)))
    return out


def zero_by_configuration(case, key):
    """True for an array a candidate may leave out because the case's configuration
    makes it 0 (modref check judges it as 0): a routed layer's aux.total when its
    aux_weight and load_balance_weight are both 0 (docs/golden-format.md)."""
    if not key.endswith("aux.total"):
        return False
    cfg = case.config.get("layer")
    if cfg is None:
        m = re.match(r"L(\d+)\.aux\.total$", key)
        layers = case.config.get("layers") or []
        if not m or int(m.group(1)) >= len(layers):
            return False
        cfg = layers[int(m.group(1))].get("layer") or {}
    aux_off = (cfg.get("aux") or "none") == "none" or not cfg.get("aux_weight")
    return aux_off and not cfg.get("load_balance_weight")


# A model case's per-layer arrays a candidate may write (each routed layer's
# L<l>.weights, L<l>.multipliers, L<l>.targets and L<l>.out), all optional.
LAYER_STAGE_ARRAYS = ("weights", "multipliers", "targets", "out")


def optional(case, key):
    """True for an array a candidate may leave out because ports do not compute it
    unless they need it (modref check and diagnose list it as absent, not judged): a
    layer case's weights and multipliers, and its targets where no loss reads them
    (no auxiliary loss, or one of weight 0); a model case's per-layer arrays
    L<l>.weights, L<l>.multipliers, L<l>.targets and L<l>.out, which read the model
    layer by layer when written (docs/golden-format.md)."""
    if case.kind == "model":
        m = re.match(r"L\d+\.(.*)$", key)
        return m is not None and m.group(1) in LAYER_STAGE_ARRAYS
    cfg = case.config.get("layer")
    if case.kind != "layer" or cfg is None:
        return False
    if key in ("weights", "multipliers"):
        return True
    if key == "targets":
        return (cfg.get("aux") or "none") == "none" or not cfg.get("aux_weight")
    return False


def write_candidate(case, path, values, allow_missing=False):
    """Checks values (see check_candidate) and writes them to path as the .npz that
    `modref check --candidate path CASE` reads. Nothing is written when a check
    fails; an existing file is replaced only by a complete new one."""
    arrays = check_candidate(case, values, allow_missing)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".candidate-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class ModrefError(Exception):
    """The modref command could not run, or refused its input (exit status 2)."""


def _modref(modref, args):
    """Runs the modref command (a path or name, or an argument list such as
    ["go", "run", "./cmd/modref"]) with args; returns (exit status, stdout, stderr)."""
    argv = [modref] if isinstance(modref, str) else list(modref)
    if not argv or (isinstance(modref, str) and shutil.which(modref) is None and not os.path.isfile(modref)):
        raise ModrefError("the modref command %r is not on PATH; install it (go install ./cmd/modref "
                          "from a clone of modref) or pass modref=PATH" % (modref,))
    p = subprocess.run(argv + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def list_cases(*patterns, modref="modref", corpus=None):
    """The names of the cases `modref list [--corpus DIR] PATTERN...` selects
    (globs such as "layer-*", or whole names; none: every case), sorted.
    A pattern matching no case raises ModrefError naming the nearest cases."""
    code, out, err = _modref(modref, ["list"] + (["--corpus", corpus] if corpus else []) + list(patterns))
    if code != 0:
        raise ModrefError("modref list %s: exit %d: %s" % (" ".join(patterns), code, err.strip()))
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


_generated = {}


def corpus_files(modref="modref", corpus=None):
    """The directory holding the case files that candidates are computed from:
    corpus when given, else the corpus of the checkout beside this file when
    there is one, else the cases `modref gen --out` writes into a temporary
    directory (once per modref command and process, removed when the process
    exits)."""
    if corpus:
        return corpus
    if os.path.isfile(os.path.join(DEFAULT_DIR, "layer-paper.json")):
        return os.path.normpath(DEFAULT_DIR)
    key = modref if isinstance(modref, str) else tuple(modref)
    if key not in _generated:
        top = tempfile.mkdtemp(prefix="modref-cases-")
        atexit.register(shutil.rmtree, top, True)
        d = os.path.join(top, "cases")
        code, _, err = _modref(modref, ["gen", "--out", d])
        if code != 0:
            raise ModrefError("modref gen --out %s: exit %d: %s" % (d, code, err.strip()))
        _generated[key] = d
    return _generated[key]


def judge(name, candidate_path, modref="modref", corpus=None):
    """Judges the candidate file of case name with `modref check`; returns
    (passed, report). On a mismatch the report is check's table followed by
    `modref diagnose`'s table and verdict; a candidate modref refuses as bad
    input (exit 2) raises ModrefError with its message."""
    flags = ["--corpus", corpus] if corpus else []
    code, out, err = _modref(modref, ["check"] + flags + ["--candidate", candidate_path, name])
    if code == 0:
        return True, out
    if code != 1:
        raise ModrefError("modref check %s: exit %d: %s" % (name, code, (err or out).strip()))
    dcode, dout, derr = _modref(modref, ["diagnose"] + flags + ["--candidate", candidate_path, name])
    if dcode not in (0, 1):
        dout = "modref diagnose: exit %d: %s" % (dcode, (derr or dout).strip())
    return False, "modref check:\n%s\nmodref diagnose:\n%s" % (out.rstrip(), dout.rstrip())


def run_case(compute, name, out_dir, modref="modref", corpus=None, allow_missing=False):
    """Loads case name, computes its candidate with compute(case) (a dict as
    write_candidate takes), writes it to out_dir/NAME.npz and judges it:
    returns judge's (passed, report)."""
    files = corpus_files(modref, corpus)
    case = load_case(files, name)
    path = os.path.join(out_dir, name + ".npz")
    write_candidate(case, path, compute(case), allow_missing)
    return judge(name, path, modref, files)


def pytest_cases(compute, *patterns, modref="modref", corpus=None, allow_missing=False, out_dir=None):
    """A pytest test function with one test per case that `modref list
    PATTERN...` selects (none: every case), named by the case: each loads
    the case, computes the candidate with compute(case), writes it (into
    pytest's tmp_path, or out_dir/NAME.npz to keep it) and judges it with
    `modref check`. A failure shows check's table and diagnose's verdict.
    Bind it to a name starting with test_ in a test module:

        test_modref = modref_golden.pytest_cases(compute_case, "layer-*")

    The cases are listed when pytest collects the module, so a pattern that
    matches nothing, or a missing modref, is a collection error."""
    import pytest  # only here: the rest of this file needs NumPy alone

    files = corpus_files(modref, corpus)
    names = list_cases(*patterns, modref=modref, corpus=files)

    @pytest.mark.parametrize("case_name", names)
    def test_case(case_name, tmp_path):
        passed, report = run_case(compute, case_name, out_dir or str(tmp_path), modref, files, allow_missing)
        if not passed:
            pytest.fail("case %s does not match modref\n\n%s" % (case_name, report), pytrace=False)

    return test_case


def _interleaved_order(d, heads):
    """The column order that takes a rotate-half weight to an interleaved one: in
    each head of width dh, column 2j comes from j and column 2j+1 from j + dh/2."""
    if heads < 1 or d % heads or (d // heads) % 2:
        raise ValueError("%d columns in %d heads: each head needs an even width" % (d, heads))
    dh = d // heads
    half = dh // 2
    order = []
    for h in range(heads):
        for j in range(half):
            order += [h * dh + j, h * dh + half + j]
    return np.array(order)


def to_interleaved_rope(w, heads):
    """A case's Wq or Wk (rotate-half RoPE) for an implementation whose RoPE pairs
    coordinates 2j and 2j+1 of each head (GPT-J, Meta's Llama checkpoints). heads is
    the number of heads in w's columns: the config's heads for Wq (d x d), its
    kv_heads for Wk (d x kv_heads*d_h) under grouped-query attention.

    The case pairs coordinate j of a head with j + d_h/2 (docs/spec.md §5); both
    conventions turn the j-th pair by pos * base**(-2j/d_h). Loading Wq and Wk
    through this function (and Wv, Wo as they are) gives every query and key the
    case's values in the interleaved layout, so the attention scores, and every
    array the case judges, are the same. Map the gradients of Wq and Wk back with
    from_interleaved_rope before writing them.
    """
    w = _as_array(w)
    return w[..., _interleaved_order(w.shape[-1], heads)]


def from_interleaved_rope(g, heads):
    """The inverse of to_interleaved_rope: an interleaved implementation's Wq or Wk
    (or their gradients, grad.param.Wq and grad.param.Wk) in the case's
    rotate-half layout."""
    g = _as_array(g)
    out = np.empty_like(g)
    out[..., _interleaved_order(g.shape[-1], heads)] = g
    return out


class Unsupported(Exception):
    """Raised by a serve() compute function to decline a case's configuration:
    `modref fuzz` skips and counts the case instead of failing it. The message
    says why ("swiglu is not implemented")."""


FUZZ_PROTOCOL = "modref-fuzz"
FUZZ_VERSION = 1


def serve(compute, stdin=None, stdout=None, allow_missing=False):
    """Serves `modref fuzz --exec CMD` the line protocol of docs/golden-format.md
    ("Running a candidate") with compute(case) -> {candidate name: array}, the
    dict write_candidate takes. Call it from the script CMD runs:

        import modref_golden as mg
        mg.serve(compute_case)

    It writes the first line {"protocol": "modref-fuzz", "version": 1}, then for
    each request line ({"id", "manifest", "arrays", "out"}) loads the case,
    calls compute, writes the candidate to "out" and replies {"id", "status":
    "ok"}; a compute that raises Unsupported gets {"status": "unsupported",
    "reason": ...}, and any other exception {"status": "error", "reason": ...}
    with its traceback on stderr, and the server goes on. While compute runs,
    sys.stdout is stderr, so a print in the user's code cannot break the
    protocol. Returns at the end of stdin."""
    import sys
    import traceback

    inp = stdin if stdin is not None else sys.stdin
    out = stdout if stdout is not None else sys.stdout

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    saved = sys.stdout
    sys.stdout = sys.stderr
    try:
        reply({"protocol": FUZZ_PROTOCOL, "version": FUZZ_VERSION})
        for line in inp:
            if not line.strip():
                continue
            rid = None
            try:
                req = json.loads(line)
                rid = req["id"]
                case = Case(*read_case(req["manifest"]))
                write_candidate(case, req["out"], compute(case), allow_missing)
                reply({"id": rid, "status": "ok", "reason": ""})
            except Unsupported as e:
                reply({"id": rid, "status": "unsupported", "reason": str(e)})
            except Exception as e:  # noqa: BLE001 (the server must outlive a failing case)
                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
                reply({"id": rid, "status": "error", "reason": "%s: %s" % (type(e).__name__, e)})
    finally:
        sys.stdout = saved
