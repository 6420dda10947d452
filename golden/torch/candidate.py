"""Write a candidate for `modref check` from the PyTorch MoD implementation.

Usage: /usr/bin/python3 golden/torch/candidate.py CASE.json OUT.npz
           [--dtype float32|float64|bfloat16|tf32|float32-native|bfloat16-pure|fp16] [--deviate NAME[+NAME...]] [--form FORM[,FORM...]]
           [--bug NAME] [--weight-scale ALPHA]
       /usr/bin/python3 golden/torch/candidate.py --into DIR CASE.json [CASE.json...] [flags as above]
       /usr/bin/python3 golden/torch/candidate.py --jobs FILE

This is what a PyTorch user's CI does with modref: load a golden case's
inputs and parameters, run their own MoD layer or model on them, compute the
gradients of the case's loss, and save every array under the candidate names
of docs/golden-format.md (the expected.* names without the prefix, and the
grad.* names) with golden/python/modref_golden.py. Here the "user's
implementation" is mod_torch; --dtype float32 runs it in float32, as a
production implementation would; --dtype bfloat16 runs it in float32 under
CPU autocast to bfloat16 (its matrix products and their gradients in bf16, as
torch.autocast does on a GPU); --dtype tf32 runs it in float32 with every
matrix product's operands rounded to TF32 (tf32_products below: what
torch.backends.cuda.matmul.allow_tf32 does on an NVIDIA GPU, which the CPU
lacks); --dtype float32-native runs it in float32 with PyTorch's own
F.layer_norm and F.cross_entropy (mod_torch.NATIVE) where float32 writes the
formulas out; --dtype bfloat16-pure keeps every tensor in bfloat16 (what
module.to(torch.bfloat16) does: inputs, parameters and their gradients in bf16,
native ops, the rotary tables computed in float32 and rounded); --dtype fp16
emulates torch.autocast(dtype=torch.float16) on a GPU (fp16_products below:
operands and results of every product rounded to fp16, forward and backward,
native ops); and --deviate NAME plants one (or, joined by +, several) of the
deviations of docs/spec.md §11, to see `modref diagnose` name it; --form says how
the planted deviation is written where ports write it in several ways
(mod_torch.PORT_FORMS: torch_topk takes top-k's indices in the order
torch.topk(sorted=False) returns them, write_order writes `selected` in the
order the block ran); --bug NAME plants a bug of mod_torch's own making that no
deviation names (mod_torch.BUGS), to see `modref diagnose` say where the candidate
first departs; --weight-scale ALPHA is the α of a planted weight_scaled
(mod_torch.WEIGHT_SCALE, 0.1 by default). --into DIR writes DIR/CASE.npz for each case named, in
one process (torch's start-up, a second, is paid once). --jobs FILE runs, in
one process too, each non-empty line of FILE as the arguments of one of the
calls above (split as a POSIX shell would, without expansions), stopping at
the first that fails. Exit status: 0 on success, 2 on bad input or usage.
"""

import os
import shlex
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_corpus as C  # noqa: E402
import mod_torch as M  # noqa: E402
import modref_golden as G  # noqa: E402  (check_corpus puts golden/python on the path)


DTYPES = ("float32", "float64", "bfloat16", "tf32", "float32-native", "bfloat16-pure", "fp16")

# The modes (--dtype) that call PyTorch's own LayerNorm and cross-entropy
# (mod_torch.NATIVE) instead of mod_torch's written-out formulas.
NATIVE_DTYPES = ("float32-native", "bfloat16-pure", "fp16")


def round_tf32(t):
    """t (float32) rounded to TF32, 10 fraction bits, to nearest, ties to even:
    the low 13 bits of each float32 rounded away (an overflow to the exponent's
    all-ones field is the infinity the format rounds to)."""
    b = t.contiguous().view(torch.int32)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF
    return torch.where(torch.isfinite(t), b.view(torch.float32), t)


def round_fp16(t):
    """t (float32) rounded to IEEE binary16 and back, to nearest, ties to even
    (beyond 65504 the infinity the format rounds to)."""
    return t.to(torch.float16).to(t.dtype)


def _keep(t):
    return t


class _RoundedProduct(torch.autograd.Function):
    """A product (torch.matmul or an einsum) of operands rounded by rnd with
    float32 accumulation and its result rounded by out; its backward products
    read rounded operands (the incoming gradient rounded by rnd) and round their
    results by out, as a GPU's reduced-precision matmul does both ways."""

    @staticmethod
    def forward(ctx, f, rnd, out, a, b):
        ra, rb = rnd(a), rnd(b)
        ctx.f, ctx.rnd, ctx.out = f, rnd, out
        ctx.save_for_backward(ra, rb)
        return out(f(ra, rb))

    @staticmethod
    def backward(ctx, g):
        ra, rb = ctx.saved_tensors
        with torch.enable_grad():
            a, b = ra.detach().requires_grad_(True), rb.detach().requires_grad_(True)
            y = ctx.f(a, b)
            ga, gb = torch.autograd.grad(y, (a, b), ctx.rnd(g))
        return None, None, None, ctx.out(ga), ctx.out(gb)


class rounded_products:
    """A context in which Tensor @ Tensor and torch.einsum of two operands
    (every product mod_torch computes) are _RoundedProduct with operand rounding
    rnd and result rounding out."""

    def __init__(self, rnd, out=_keep):
        self.rnd, self.out = rnd, out

    def __enter__(self):
        self.matmul, self.einsum = torch.Tensor.__matmul__, torch.einsum
        mm, es, rnd, out = self.matmul, self.einsum, self.rnd, self.out
        torch.Tensor.__matmul__ = lambda a, b: _RoundedProduct.apply(mm, rnd, out, a, b)
        torch.einsum = lambda eq, a, b: _RoundedProduct.apply(lambda x, y: es(eq, x, y), rnd, out, a, b)

    def __exit__(self, *exc):
        torch.Tensor.__matmul__, torch.einsum = self.matmul, self.einsum


def tf32_products():
    """Products of TF32-rounded operands accumulated and returned in float32
    (what torch.backends.cuda.matmul.allow_tf32 does on an NVIDIA GPU)."""
    return rounded_products(round_tf32)


def fp16_products():
    """Products of fp16-rounded operands accumulated in float32 and rounded to
    fp16, forward and backward: what torch.autocast(dtype=torch.float16) does to
    a matrix product on a GPU (CPU autocast in torch 1.13 has no fp16)."""
    return rounded_products(round_fp16, round_fp16)


def candidate(case, dtype="float64", deviation=None, forms=(), bug=None, weight_scale=0.1):
    """The candidate arrays of mod_torch on case (a modref_golden.Case), in dtype
    (one of DTYPES), with the deviations deviation names (joined by +)
    planted in the port forms forms names (weight_scaled's α weight_scale),
    and the unnamed bug bug: what write_candidate takes."""
    M.DTYPE = {"float64": torch.float64, "bfloat16-pure": torch.bfloat16}.get(dtype, torch.float32)
    torch.set_default_dtype(torch.float32 if M.DTYPE == torch.bfloat16 else M.DTYPE)
    M.NATIVE = dtype in NATIVE_DTYPES
    M.DEVIATION = deviation
    M.FORMS = forms
    M.BUG = bug
    M.WEIGHT_SCALE = weight_scale
    if dtype == "bfloat16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            values, grads, _ = C.run_case(case.manifest, case.arrays)
    elif dtype in ("tf32", "fp16"):
        with tf32_products() if dtype == "tf32" else fp16_products():
            values, grads, _ = C.run_case(case.manifest, case.arrays)
    else:
        values, grads, _ = C.run_case(case.manifest, case.arrays)
    cand = {}
    for key in case.outputs:
        v = grads.get(key) if key.startswith("grad.") else values.get(key)
        if v is None:
            continue  # write_candidate names what is missing
        if torch.is_tensor(v):
            v = v.detach().cpu()
            a = (v.float() if v.dtype == torch.bfloat16 else v).numpy()  # numpy has no bf16
        else:
            a = np.asarray(v)
        if a.dtype.kind == "f":
            a = a.astype(np.float64 if dtype == "float64" else np.float32)
        cand[key] = a
    return cand


def run_jobs(path):
    """Runs each non-empty line of the file at path as main's arguments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        print("candidate: --jobs %s: %s" % (path, e), file=sys.stderr)
        return 2
    for n, line in enumerate(lines, 1):
        try:
            argv = shlex.split(line)
        except ValueError as e:
            print("candidate: --jobs %s line %d: %s" % (path, n, e), file=sys.stderr)
            return 2
        if argv and "--jobs" in argv:
            print("candidate: --jobs %s line %d: a job cannot name --jobs" % (path, n), file=sys.stderr)
            return 2
        if argv:
            rc = main(argv)
            if rc:
                print("candidate: --jobs %s line %d failed" % (path, n), file=sys.stderr)
                return rc
    return 0


def main(argv):
    if argv[:1] == ["--jobs"]:
        if len(argv) != 2:
            print("\n".join(__doc__.strip().splitlines()[2:7]), file=sys.stderr)
            return 2
        return run_jobs(argv[1])
    args, dtype, deviation, forms, bug, into, scale = [], "float64", None, (), None, None, "0.1"
    it = iter(argv)
    for a in it:
        if a == "--into":
            into = next(it, "")
        elif a == "--dtype":
            dtype = next(it, "")
        elif a == "--deviate":
            deviation = next(it, "")
        elif a == "--form":
            forms = tuple(next(it, "").split(","))
        elif a == "--bug":
            bug = next(it, "")
        elif a == "--weight-scale":
            scale = next(it, "")
        else:
            args.append(a)
    try:
        weight_scale = float(scale)
    except ValueError:
        weight_scale = float("nan")
    if not weight_scale > 0 or (len(args) != 2 if into is None else not args or not into) or dtype not in DTYPES or (deviation is not None and not set(deviation.split("+")) <= set(M.DEVIATIONS)) or not set(forms) <= set(M.PORT_FORMS) or (bug is not None and bug not in M.BUGS):
        print("\n".join(__doc__.strip().splitlines()[2:7]), file=sys.stderr)
        return 2
    jobs = [tuple(args)] if into is None else [
        (m, os.path.join(into, os.path.basename(m)[:-len(".json")] + ".npz") if m.endswith(".json") else "") for m in args]
    for case_json, out in jobs:
        if not out:
            print("candidate: %s: a case is named by its CASE.json" % case_json, file=sys.stderr)
            return 2
        if os.path.exists(out) and os.path.samefile(out, case_json[:-len(".json")] + ".npz"):
            print("candidate: %s is the case's own arrays; write candidates elsewhere" % out, file=sys.stderr)
            return 2
        try:
            case = G.Case(*C.load_case(case_json))
            cand = candidate(case, dtype, deviation, forms, bug, weight_scale)
            G.write_candidate(case, out, cand)
        except (C.BadInput, G.CandidateError) as e:
            print("candidate: %s: %s" % (case_json, e), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
