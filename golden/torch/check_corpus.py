#!/usr/bin/python3
"""Check modref's golden corpus against the independent PyTorch implementation.

Usage: /usr/bin/python3 golden/torch/check_corpus.py [DIR | CASE.json ...] [-v]

For every case (NAME.json + NAME.npz) it runs mod_torch on the case's inputs and
parameters in float64, evaluates the manifest's "loss" formula, backpropagates
with torch.autograd, and compares every expected.* and grad.* array with the
corpus. One line per case, then "N passed, M failed".
Exit status: 0 all pass, 1 a case failed, 2 bad input.
"""

import math
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
import mod_torch as M  # noqa: E402
import modref_golden as G  # noqa: E402

torch.set_default_dtype(torch.float64)
DEFAULT_CONVENTIONS = dict(M.CONVENTIONS)

# Tolerances of this float64 cross-check; golden/torch/README.md gives the measurements.
# Values (forward outputs, losses): both sides compute the same formulas in float64 in a
# different order, so they agree to round-off. Measured on the 28-case corpus: worst
# 9.9e-14 absolute (on a loss of 79.5), 1.7e-14 normwise relative.
VALUE_RTOL = 1e-11
VALUE_ATOL = 1e-12
# Gradients: the corpus holds ref's analytic backward passes (float64, routing frozen),
# exact to round-off like autograd's. The bounds were set when the corpus held central
# finite differences (step 1e-5), whose error is truncation (~h^2 f''') plus cancellation
# (~eps |loss| / h), an absolute error on the scale of the problem, so atol is relative
# to the array's largest entry (at least 1). Measured then: worst |torch - corpus| /
# max(1, max|corpus|) = 1.75e-9, a 57x margin below the bound; it is kept.
GRAD_RTOL = 1e-6
GRAD_ATOL_SCALED = 1e-7   # atol = GRAD_ATOL_SCALED * max(1, max|expected|)


# Reading a case: (manifest, arrays), every listed array's shape and dtype checked.
BadInput = G.BadInput
load_case = G.read_case


def tens(a):
    if a.dtype.kind in "iu":
        return torch.from_numpy(np.ascontiguousarray(a)).to(torch.long)
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(M.DTYPE)


# --------------------------------------------------------------------------
# The loss formula

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")
_FUNCS = {"sum": torch.sum, "mean": torch.mean}


def expand_formula(formula, cfg):
    """Expands the prose form 'sum over routed layers of L<l>.NAME' into a sum of names."""
    routed = [l for l, s in enumerate(cfg.get("layers") or []) if s.get("routed")]

    def rep(mo):
        terms = [mo.group(1).replace("<l>", str(l)) for l in routed]
        return "(" + (" + ".join(terms) if terms else "0") + ")"
    return re.sub(r"sum over routed layers of (\S+)", rep, formula)


def eval_loss(formula, values):
    """Evaluate a formula such as 'sum(upstream.out * out) + aux.total' over values."""
    used = []

    def repl(mo):
        nm = mo.group(0)
        rest = formula[mo.end():].lstrip()
        if rest.startswith("(") and nm in _FUNCS:
            return nm
        if nm not in values:
            raise BadInput("loss formula %r: unknown name %r" % (formula, nm))
        used.append(nm)
        return "V[%r]" % nm

    code = _NAME.sub(repl, formula)
    try:
        v = eval(code, {"__builtins__": {}}, dict(_FUNCS, V=values))  # noqa: S307 (own tiny grammar)
    except BadInput:
        raise
    except Exception as e:  # a formula this checker does not understand
        raise BadInput("loss formula %r: %s" % (formula, e))
    if not torch.is_tensor(v):
        v = torch.tensor(float(v))
    return v.sum(), used


# --------------------------------------------------------------------------
# Running a case

def params_of(arrays):
    P = {}
    for k, a in arrays.items():
        if k.startswith("param."):
            t = tens(a)
            t.requires_grad_(True)
            P[k[len("param."):]] = t
    return P


def valid_of(cfg, arrays):
    B = int(cfg["batch"])
    S = int(cfg["seq_len"])
    if "input.valid" in arrays:
        return [int(v) for v in arrays["input.valid"].reshape(-1)]
    if cfg.get("valid_lengths") is not None:
        return [int(v) for v in cfg["valid_lengths"]]
    return [S] * B


def layer_values(res, prefix=""):
    """Computed values of one routed layer under the corpus' names (without 'expected.')."""
    out = {}
    for key in ("out", "router_logits", "selected", "weights", "multipliers", "targets",
                "predictor_logits", "predictor_accuracy"):
        if key in res:
            out[prefix + key] = res[key]
    for k, v in res["aux"].items():
        out[prefix + "aux." + k] = v
    routed = res["mask"].to(torch.long)
    out[prefix + "routed"] = routed
    return out


def run_case(man, arrays):
    kind = man.get("kind")
    cfg = man.get("config") or {}
    P = params_of(arrays)
    valid = valid_of(cfg, arrays)
    values = {}
    grads_of = dict(("param." + k, v) for k, v in P.items())
    info = {"gaps": {}, "sel": {}}
    if kind == "layer":
        x = tens(arrays["input.x"]).requires_grad_(True)
        grads_of["input.x"] = x
        noise = tens(arrays["input.noise"]) if "input.noise" in arrays else None
        jit = tens(arrays["input.jitter"]) if "input.jitter" in arrays else None
        res = M.routed_layer(x, valid, P, cfg["layer"], noise, jit)
        values.update(layer_values(res))
        info["gaps"][None] = res["gaps"]
        info["sel"][None] = res["topk"]
    elif kind in ("model", "decode"):
        tokens = tens(arrays["input.tokens"])
        noises, jits = {}, {}
        for k, a in arrays.items():
            mo = re.fullmatch(r"input\.(noise|jitter)\.L(\d+)", k)
            if mo:
                (noises if mo.group(1) == "noise" else jits)[int(mo.group(2))] = tens(a)
        fw = M.model_forward(tokens, valid, P, cfg, noises, jits)
        values["logits"] = fw["logits"]
        for l, res in fw["layers"].items():
            values.update(layer_values(res, "L%d." % l))
            info["gaps"][l] = res["gaps"]
            info["sel"][l] = res["topk"]
        values["aux.total"] = fw["aux_total"]
        if "input.targets" in arrays:
            ce = M.cross_entropy(fw["logits"], tens(arrays["input.targets"]))
            values["ce"] = ce
            values["loss"] = ce + fw["aux_total"]
        if kind == "decode":
            with torch.no_grad():
                dl, routed = M.decode(tokens, valid, {k: v.detach() for k, v in P.items()}, cfg)
            values["decode_logits"] = dl
            # expected.L<l>.routed of a decode case: the decisions taken while decoding
            # (the full forward's are checked through expected.L<l>.selected)
            for l, r in routed.items():
                values["L%d.routed" % l] = r
    elif kind == "mode":
        x = tens(arrays["input.x"]).requires_grad_(True)
        grads_of["input.x"] = x
        res = M.mode_layer(x, P, cfg["mode"])
        for key in ("out", "router_logits", "selected", "gates", "expert_choice"):
            if key in res:
                values[key] = res[key]
        for i, g in enumerate(res["gaps"]):
            info["gaps"][i] = g
    else:
        raise BadInput("unknown case kind %r" % kind)

    # names the loss formula may use: computed values (bare or as expected.*) and npz arrays
    env = {}
    for k, a in arrays.items():
        if not k.startswith("expected.") and not k.startswith("grad."):
            env[k] = tens(a) if a.dtype.kind == "f" else tens(a).to(M.DTYPE)
    for k, v in values.items():
        if torch.is_tensor(v) and v.dtype == M.DTYPE:
            env[k] = v
            env["expected." + k] = v
    formula = man.get("loss")
    grads = {}
    # The manifest lists the grad.* arrays even where the .npz leaves them
    # out (the case modref fuzz hands a candidate).
    listed = set(arrays) | {spec.get("name", "") for spec in man.get("arrays", [])}
    if any(k.startswith("grad.") for k in listed):
        if not formula or formula.startswith("none"):
            raise BadInput("case has grad.* arrays but no loss formula")
        loss, _ = eval_loss(expand_formula(formula, cfg), env)
        values["loss"] = loss
        leaves = list(grads_of.items())
        gs = torch.autograd.grad(loss, [t for _, t in leaves], allow_unused=True)
        for (nm, t), g in zip(leaves, gs):
            grads["grad." + nm] = torch.zeros_like(t) if g is None else g
    return values, grads, info


# --------------------------------------------------------------------------
# Comparing

def compare(man, arrays, values, grads, info):
    """Returns (ok, rows) with rows = [(array, status, maxabs, maxrel, ratio, note)]."""
    rows = []
    cfg = man.get("config") or {}
    B, S = int(cfg.get("batch", 0)), int(cfg.get("seq_len", 0))
    valid = valid_of(cfg, arrays) if B and S else []
    padded = None
    if valid and any(v < S for v in valid):
        padded = np.arange(S)[None, :] >= np.array(valid)[:, None]       # B x S
    names = sorted(k for k in arrays if k.startswith("expected.") or k.startswith("grad."))
    for nm in names:
        exp = arrays[nm]
        if nm.startswith("grad."):
            got = grads.get(nm)
            is_grad = True
        else:
            key = nm[len("expected."):]
            got = values.get(key)
            is_grad = False
        if got is None:
            rows.append((nm, "MISSING", math.nan, math.nan, math.inf, "not computed by mod_torch"))
            continue
        if torch.is_tensor(got):
            got = got.detach().numpy()
        got = np.asarray(got)
        if got.shape != exp.shape:
            rows.append((nm, "SHAPE", math.nan, math.nan, math.inf,
                         "computed shape %s, corpus %s" % (list(got.shape), list(exp.shape))))
            continue
        if padded is not None and exp.ndim >= 2 and exp.shape[:2] == (B, S) \
                and not nm.endswith("selected"):
            # golden-format.md: a B x S array is judged at valid positions only, and
            # per-token fields are stored as 0 at padded ones (checked on the corpus).
            pm = padded.reshape(padded.shape + (1,) * (exp.ndim - 2))
            pm = np.broadcast_to(pm, exp.shape)
            if re.search(r"(^|\.)(router_logits|weights|multipliers|targets|predictor_logits)$", nm) \
                    and np.any(exp[pm] != 0):
                w = tuple(int(i) for i in np.argwhere(pm & (exp != 0))[0])
                rows.append((nm + "@padding", "FAIL", float(np.max(np.abs(exp[pm]))), math.nan, math.inf,
                             "corpus is not 0 at padded position %s: %r" % (list(w), exp[w])))
            got = np.where(pm, exp, got)
        if exp.dtype.kind in "iu":
            bad = np.argwhere(got.astype(np.int64) != exp)
            if len(bad):
                note = routing_note(nm, got, exp, man, info)
                rows.append((nm, "ROUTING" if "selected" in nm or "routed" in nm else "INT",
                             float(np.max(np.abs(got.astype(np.int64) - exp))), math.nan, math.inf, note))
            else:
                rows.append((nm, "ok", 0.0, 0.0, 0.0, ""))
            continue
        exp = exp.astype(np.float64)
        got = got.astype(np.float64)
        err = np.abs(got - exp)
        scale = float(np.max(np.abs(exp))) if exp.size else 0.0
        if is_grad:
            atol = GRAD_ATOL_SCALED * max(1.0, scale)
            rtol = GRAD_RTOL
        else:
            atol, rtol = VALUE_ATOL, VALUE_RTOL
        tol = atol + rtol * np.abs(exp)
        maxabs = float(np.max(err)) if err.size else 0.0
        maxrel = maxabs / scale if scale > 0 else (0.0 if maxabs == 0 else math.inf)
        ratio = float(np.max(err / tol)) if err.size else 0.0
        if not np.all(np.isfinite(got)):
            rows.append((nm, "NONFINITE", maxabs, maxrel, math.inf, ""))
            continue
        note = ""
        if ratio > 1:
            w = np.unravel_index(int(np.argmax(err / tol)), err.shape)
            note = "worst at %s: torch %.17g corpus %.17g" % (list(map(int, w)), got[w], exp[w])
        rows.append((nm, "ok" if ratio <= 1 else "FAIL", maxabs, maxrel, ratio, note))
    rows.extend(compare_gaps(man, info))
    ok = all(r[1] == "ok" for r in rows)
    return ok, rows


def compare_gaps(man, info):
    """The manifest's routing gaps (one list per routed layer, one value per row) against
    the ones computed here: r_(k) - r_(k+1) under top-k, min |logit| under causal routing."""
    routing = man.get("routing") or {}
    want = routing.get("gaps")
    if want is None and routing.get("min_gap") is not None:   # the doc's example: one list, one layer
        want = [routing["min_gap"]]
    if want is None:
        return []
    layers = sorted(k for k in info["gaps"] if k is not None)
    mine = [info["gaps"][None]] if None in info["gaps"] else [info["gaps"][l] for l in layers]
    if len(mine) != len(want) or any(len(a) != len(b) for a, b in zip(mine, want)):
        return [("routing.gaps", "FAIL", math.nan, math.nan, math.inf,
                 "manifest lists %s gaps, torch computed %s" % ([len(w) for w in want], [len(m) for m in mine]))]
    err = 0.0
    where = ""
    for li, (a, b) in enumerate(zip(mine, want)):
        for row, (ga, gb) in enumerate(zip(a, b)):
            ga = 0.0 if ga is None else ga
            e = abs(ga - float(gb))
            if e > err:
                err, where = e, "routed layer #%d row %d: torch %.17g manifest %.17g" % (li, row, ga, float(gb))
    ok = err <= 1e-9
    return [("routing.gaps", "ok" if ok else "FAIL", err, math.nan, err / 1e-9, "" if ok else where)]


def routing_note(nm, got, exp, man, info):
    margin = (man.get("routing") or {}).get("margin")
    parts = []
    for b in range(exp.shape[0]):
        g = set(int(v) for v in got[b].reshape(-1) if v >= 0) if "selected" in nm else \
            set(int(i) for i in np.nonzero(got[b])[0])
        e = set(int(v) for v in exp[b].reshape(-1) if v >= 0) if "selected" in nm else \
            set(int(i) for i in np.nonzero(exp[b])[0])
        if g != e:
            mo = re.match(r"expected\.L(\d+)\.", nm)
            layer = int(mo.group(1)) if mo else None
            gap = None
            gl = info["gaps"].get(layer)
            if gl is not None and b < len(gl):
                gap = gl[b]
            near = "" if gap is None or margin is None else (
                " (gap %.3g %s margin %.3g)" % (gap, "INSIDE" if gap < margin else "outside", margin))
            parts.append("row %d: torch-only %s corpus-only %s%s"
                         % (b, sorted(g - e), sorted(e - g), near))
    return "; ".join(parts)


# --------------------------------------------------------------------------

def find_cases(args):
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(os.path.dirname(os.path.dirname(here)), "golden", "corpus")
    if not args:
        args = [default]
    cases = []
    for a in args:
        if os.path.isdir(a):
            cases.extend(sorted(os.path.join(a, f) for f in os.listdir(a) if f.endswith(".json")))
        elif a.endswith(".json") and os.path.isfile(a):
            cases.append(a)
        else:
            raise BadInput("%s: not a corpus directory or a case manifest" % a)
    if not cases:
        raise BadInput("%s: no cases found" % ", ".join(args))
    return cases


def main(argv):
    verbose = "-v" in argv
    args = []
    it = iter(argv)
    for a in it:
        if a == "-v":
            continue
        if a == "--convention" or a.startswith("--convention="):
            kv = a.split("=", 1)[1] if "=" in a and a.startswith("--convention=") else next(it, "")
            k, _, v = kv.partition("=")
            if k not in M.CONVENTIONS:
                print("bad usage: unknown convention %r (known: %s)" % (k, ", ".join(sorted(M.CONVENTIONS))))
                return 2
            M.CONVENTIONS[k] = v
            continue
        if a == "--deviate" or a.startswith("--deviate="):
            name = a.split("=", 1)[1] if a.startswith("--deviate=") else next(it, "")
            unknown = [n for n in name.split("+") if n not in M.DEVIATIONS]
            if unknown:
                print("bad usage: unknown deviation %r (known: %s; join several with +)"
                      % (unknown[0], ", ".join(M.DEVIATIONS)))
                return 2
            M.DEVIATION = name
            continue
        args.append(a)
    if M.DEVIATION:
        print("deviation planted in mod_torch: %s (cases listing it in 'catches' should FAIL)" % M.DEVIATION)
    nondefault = {k: v for k, v in M.CONVENTIONS.items() if v != DEFAULT_CONVENTIONS[k]}
    if nondefault:
        print("conventions: %s" % ", ".join("%s=%s" % kv for kv in sorted(nondefault.items())))
    try:
        cases = find_cases(args)
    except BadInput as e:
        print("bad input: %s" % e)
        return 2
    npass = nfail = 0
    bad = False
    for path in cases:
        name = os.path.basename(path)[:-5]
        try:
            man, arrays = load_case(path)
            values, grads, info = run_case(man, arrays)
            ok, rows = compare(man, arrays, values, grads, info)
        except BadInput as e:
            print("BAD  %s: %s" % (name, e))
            bad = True
            nfail += 1
            continue
        except Exception as e:  # an error of this implementation on a case: a failure, reported
            print("FAIL %s: mod_torch raised %s: %s" % (name, type(e).__name__, e))
            nfail += 1
            continue
        worst = max(rows, key=lambda r: (r[1] != "ok", r[4] if not math.isnan(r[4]) else math.inf))
        grad_rows = [r for r in rows if r[0].startswith("grad.") and r[1] == "ok"]
        val_rows = [r for r in rows if r[0].startswith("expected.") and r[1] == "ok"]
        gmax = max([r[3] for r in grad_rows] + [0.0])
        vmax = max([r[2] for r in val_rows] + [0.0])
        print("%s %s: worst %s max_abs %.3g max_rel %.3g (err/tol %.3g) | values max_abs %.2g, grads max_rel %.2g%s"
              % ("PASS" if ok else "FAIL", name, worst[0], worst[2], worst[3], worst[4], vmax, gmax,
                 (" | " + worst[5]) if worst[5] else ""))
        if verbose or not ok:
            for r in rows:
                if verbose or r[1] != "ok":
                    print("    %-9s %-40s max_abs %.3g max_rel %.3g err/tol %.3g %s"
                          % (r[1], r[0], r[2], r[3], r[4], r[5]))
        if ok:
            npass += 1
        else:
            nfail += 1
    print("%d passed, %d failed" % (npass, nfail))
    if bad:
        return 2
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
