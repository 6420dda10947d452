"""Measure modref's tolerances on correct implementations (issue 33, "How it is measured").

Usage: /usr/bin/python3 golden/torch/measure_tol.py MODREF OUT
           [--modes MODE,...] [--seeds N,...] [--cases N] [--max-seq S] [--ratios K|all]
           [--corpus] [--example CONFIG.json] [--timeout D] [--ci]

MODREF is a built modref command, OUT a directory for the runs' files (created).
Each mode is the PyTorch implementation of golden/torch (mod_torch, through
fuzz_candidate.py as a line-protocol server) computed one correct way and judged
under its precision profile (MODES below). For each mode and seed it runs
`modref fuzz --exec` on --cases cases of up to --max-seq tokens, with no
shrinking and no stop at a failure, and records the cases judged, every failure
(its array, error/tolerance ratio and reproducer directory) and the worst ratio:
each failure's own, and of the cases that passed the one fuzz reports
(closest_pass in its --json summary: the array closest to its tolerance, on
the case as fuzz judged it). --ratios K also regenerates up to K of the cases
that passed (all with "all"; default 0) by `modref gen --config` from the
manifest fuzz drew and judges them with modref check: a cross-check that
gen --config makes the same case and check gives the same ratio, at the cost
of a gen --config per case (more than the fuzz case itself costs). --corpus
also judges every corpus case, --example the case gen --config makes of
CONFIG.json (docs/examples/llama3-layer-d512-s2048.json), or a case's own
manifest that gen --config made, in every mode.

--timeout D (default 10m) is fuzz's --timeout and --start-timeout: a case
the candidate takes longer over, or a server restart (importing torch)
slower than D, is reported as timed out, which on a loaded machine is the
load's doing, not the tolerances'.

Prints one line per run and per mode and writes OUT/summary.json. With --ci the
exit status is 1 when any case of any mode failed (a false alarm: every mode is
a correct implementation), else 0; without it, 0 unless a run could not be
made (2).
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"

# mode -> (candidate.py --dtype, modref --precision or None for the manifests' own tolerances)
MODES = {
    "float32-native": ("float32-native", "float32"),
    "float32-native-manifest": ("float32-native", None),
    "float32": ("float32", "float32"),
    "bf16-pure": ("bfloat16-pure", "bf16"),
    "bf16-autocast": ("bfloat16", "bf16"),
    "tf32": ("tf32", "tf32"),
    "fp16": ("fp16", "fp16"),
    "float64": ("float64", "float64"),
}
DEFAULT_MODES = ("float32-native", "float32-native-manifest", "bf16-pure", "bf16-autocast", "tf32", "fp16", "float64")


def ratio_of(a):
    """The error/tolerance ratio of one array result of modref check --json: the
    element it reports is the one furthest outside (or closest to leaving) the
    tolerance, so this is the array's largest."""
    if a.get("status") == "missing":
        return float("inf")
    tol = a.get("tolerance") or {}
    got, want = a.get("got"), a.get("want")
    if got is None or want is None:
        return 0.0 if a.get("status") == "pass" else float("inf")
    bound = tol.get("atol", 0.0) + tol.get("rtol", 0.0) * abs(want)
    d = abs(got - want)
    if bound > 0:
        return d / bound
    return 0.0 if d == 0 else float("inf")


def worst_of(result):
    """(ratio, array name) of the worst array of one case's check result."""
    best = (0.0, "")
    for a in result.get("arrays") or []:
        if a.get("routing") and a.get("status") == "fail":
            best = max(best, (float("inf"), a["name"] + " (routing)"))
        best = max(best, (ratio_of(a), a["name"]))
    return best


def check(modref, corpus, cand, precision, names=()):
    """modref check --json of the cases names (all present ones when empty) of
    corpus against the directory cand: the list of case results."""
    cmd = [modref, "check", "--corpus", corpus, "--candidate", cand, "--present", "--json"]
    if precision:
        cmd += ["--precision", precision]
    p = subprocess.run(cmd + list(names), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return json.loads(p.stdout)["results"]


def regenerate(modref, kept, names, into):
    """Regenerates each fuzz case of kept (its manifest) with gen --config into
    into: the names regenerated and, for the others, gen's error."""
    os.makedirs(into, exist_ok=True)
    done, errors = [], {}
    for name in names:
        with open(os.path.join(kept, name + ".json")) as f:
            m = json.load(f)
        cfg = os.path.join(into, name + ".config")
        with open(cfg, "w") as f:
            json.dump({"name": name, "kind": m["kind"], "seed": m["provenance"]["seed"], "config": m["config"]}, f)
        p = subprocess.run([modref, "gen", "--config", cfg, "--out", into],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            errors[name] = "gen --config %s: exit %d: %s" % (cfg, p.returncode, p.stderr.strip()[-600:])
        else:
            done.append(name)
    return done, errors


def fuzz_run(modref, mode, seed, cases, max_seq, ratios, out, timeout):
    """One fuzz run of mode on seed: a dict of what it measured."""
    dtype, precision = MODES[mode]
    run = os.path.join(out, "%s-seed%d" % (mode, seed))
    kept = os.path.join(run, "kept")
    os.makedirs(kept, exist_ok=True)
    cmd = [modref, "fuzz", "--exec", "%s %s --dtype %s --keep %s" % (PY, os.path.join(HERE, "fuzz_candidate.py"), dtype, kept),
           "--seed", str(seed), "--cases", str(cases), "--max-seq", str(max_seq), "--shrink-tries", "0",
           "--max-failures", str(cases + 1), "--json", "--out", os.path.join(run, "repro"),
           "--timeout", timeout, "--start-timeout", timeout]
    if precision:
        cmd += ["--precision", precision]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        s = json.loads(p.stdout)
    except ValueError:
        s = None
    # exit 2 with a summary: a case modref could not judge or the candidate botched;
    # a failure of the mode like any other, recorded
    if p.returncode not in (0, 1, 2) or not isinstance(s, dict) or (p.returncode == 2 and not s.get("failures")):
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr[-3000:]))
    rec = {"mode": mode, "seed": seed, "cases": s["cases"], "judged": s["judged"], "kinds": s.get("kinds"),
           "seconds": round(time.time() - t0, 1), "cases_per_second": s.get("cases_per_second"),
           "command": " ".join(cmd), "failures": [], "worst": [0.0, ""]}
    if p.returncode == 2:
        rec["stopped"] = "fuzz exit 2 (a case not judged) after %d of %d cases" % (s["cases"], cases)
    failed = set()
    for f in s.get("failures") or []:
        failed.add(f.get("case"))
        rec["failures"].append({"case": f.get("case"), "kind": f.get("kind"), "reason": (f.get("reason") or "")[:400],
                                "original": f.get("original"), "reproducer": f.get("reproducer")})
        if f.get("kind") != "mismatch":
            rec["worst"] = [float("inf"), "%s: %s" % (f.get("case"), f.get("kind"))]
    # every failure's ratio, from its reproducer (the case as drawn: no shrinking)
    for f in rec["failures"]:
        rd = f.get("reproducer")
        if f["kind"] == "mismatch" and rd and os.path.isdir(rd):
            res = check(modref, rd, os.path.join(rd, "candidate"), precision)
            for r in res:
                w = worst_of(r)
                f["worst"] = [w[0], w[1]]
                if w[0] > rec["worst"][0]:
                    rec["worst"] = [w[0], "%s: %s" % (f["case"], w[1])]
    cp = s.get("closest_pass")
    if cp and cp["ratio"] > rec["worst"][0]:
        rec["worst"] = [cp["ratio"], "%s: %s" % (cp["case"], cp["array"])]
    passed = sorted(n[:-len(".json")] for n in os.listdir(kept) if n.endswith(".json") and n[:-len(".json")] not in failed)
    sample = passed if ratios < 0 else passed[:ratios]
    if sample:
        regen = os.path.join(run, "regen")
        sample, errors = regenerate(modref, kept, sample, regen)
        if errors:
            rec["regen_errors"] = errors
        res = check(modref, regen, kept, precision, sample) if sample else []
        rec["ratios_of"] = len(res)
        for r in res:
            w = worst_of(r)
            if not r.get("pass"):
                rec["regen_disagrees"] = rec.get("regen_disagrees", []) + [r["case"]]
            if w[0] > rec["worst"][0]:
                rec["worst"] = [w[0], "%s: %s" % (r["case"], w[1])]
    return rec


def corpus_run(modref, mode, cases_dir, names, out, tag):
    """Every case names of cases_dir computed in mode and judged: a dict as fuzz_run's."""
    dtype, precision = MODES[mode]
    cand = os.path.join(out, "%s-%s" % (mode, tag))
    os.makedirs(cand, exist_ok=True)
    t0 = time.time()
    p = subprocess.run([PY, os.path.join(HERE, "candidate.py"), "--into", cand] +
                       [os.path.join(cases_dir, n + ".json") for n in names] + ["--dtype", dtype],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError("candidate.py --dtype %s on %s: exit %d\n%s" % (dtype, tag, p.returncode, p.stderr[-2000:]))
    res = check(modref, cases_dir, cand, precision, names)
    rec = {"mode": mode, "set": tag, "judged": len(res), "failures": [], "worst": [0.0, ""],
           "seconds": round(time.time() - t0, 1)}
    for r in res:
        w = worst_of(r)
        if not r.get("pass"):
            rec["failures"].append({"case": r["case"], "worst": [w[0], w[1]], "candidate": os.path.join(cand, r["case"] + ".npz"),
                                    "command": "modref check --corpus %s --candidate %s %s%s" % (
                                        cases_dir, cand, r["case"], " --precision " + precision if precision else "")})
        if w[0] > rec["worst"][0]:
            rec["worst"] = [w[0], "%s: %s" % (r["case"], w[1])]
    return rec


def fmt(rec):
    w = rec["worst"]
    return "%-24s %-12s judged %4d  failures %3d  worst %s at %s  (%.0f s)%s" % (
        rec["mode"], rec.get("set") or "seed %d" % rec["seed"], rec["judged"], len(rec["failures"]),
        "%.3g" % w[0], w[1] or "-", rec["seconds"], "; " + rec["stopped"] if rec.get("stopped") else "")


def main(argv):
    opts = {"--modes": ",".join(DEFAULT_MODES), "--seeds": "1", "--cases": "100", "--max-seq": "64",
            "--ratios": "0", "--example": "", "--timeout": "10m"}
    flags, args = set(), []
    it = iter(argv)
    for a in it:
        if a in opts:
            opts[a] = next(it, "")
        elif a in ("--corpus", "--ci"):
            flags.add(a)
        else:
            args.append(a)
    try:
        modes = opts["--modes"].split(",")
        seeds = [int(s) for s in opts["--seeds"].split(",")]
        cases, max_seq = int(opts["--cases"]), int(opts["--max-seq"])
        ratios = -1 if opts["--ratios"] == "all" else int(opts["--ratios"])
    except ValueError:
        modes = None
    if len(args) != 2 or not modes or not set(modes) <= set(MODES) or cases < 0 or ratios < -1:
        print("\n".join(__doc__.strip().splitlines()[2:5]), file=sys.stderr)
        return 2
    modref, out = os.path.abspath(args[0]), os.path.abspath(args[1])
    os.makedirs(out, exist_ok=True)
    recs = []
    sets = []
    if "--corpus" in flags:
        corpus = os.path.join(out, "corpus")
        subprocess.run([modref, "gen", "--out", corpus], check=True, stdout=subprocess.DEVNULL)
        names = sorted(n[:-5] for n in os.listdir(corpus) if n.endswith(".json"))
        sets.append((corpus, names, "corpus"))
    if opts["--example"]:
        with open(opts["--example"]) as f:
            made = "arrays" in json.load(f)
        if made:  # a case gen --config already made: judged where it is
            ex, names = os.path.dirname(os.path.abspath(opts["--example"])), [os.path.basename(opts["--example"])[:-5]]
        else:
            ex = os.path.join(out, "example")
            subprocess.run([modref, "gen", "--config", opts["--example"], "--out", ex], check=True,
                           stdout=subprocess.DEVNULL)
            names = sorted(n[:-5] for n in os.listdir(ex) if n.endswith(".json"))
        sets.append((ex, names, "example"))
    try:
        for mode in modes:
            for cases_dir, names, tag in sets:
                recs.append(corpus_run(modref, mode, cases_dir, names, out, tag))
                print(fmt(recs[-1]), flush=True)
            for seed in seeds if cases else ():
                recs.append(fuzz_run(modref, mode, seed, cases, max_seq, ratios, out, opts["--timeout"]))
                print(fmt(recs[-1]), flush=True)
                for f in recs[-1]["failures"]:
                    print("    %s %s: %s -> %s" % (f["case"], f["kind"], f["reason"].split("\n")[0][:200], f["reproducer"]), flush=True)
    except RuntimeError as e:
        print("measure_tol: %s" % e, file=sys.stderr)
        return 2
    finally:
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(recs, f, indent=1)
    print("per mode:")
    bad = 0
    for mode in modes:
        rs = [r for r in recs if r["mode"] == mode]
        judged, fails = sum(r["judged"] for r in rs), sum(len(r["failures"]) for r in rs)
        w = max((r["worst"] for r in rs), default=[0.0, ""])
        bad += fails
        print("  %-24s judged %5d  failures %3d  worst ratio %.3g (%s)" % (mode, judged, fails, w[0], w[1]))
    return 1 if bad and "--ci" in flags else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
