"""Time modref's language-model step and PyTorch's, interleaved pair by pair.

Usage: /usr/bin/python3 bench/paired.py [--sizes small,medium,large]
           [--variants dense,mod-every-other-12.5,mod-all-12.5] [--threads 1,2]
           [--reps N] [--steps small=10,medium=3,large=2] [--markdown FILE]
           [--aten CAPABILITY] [--no-pin]

For every size, routing variant and thread count it runs, rep after rep,
three processes: modref's BenchmarkModStep (mod/bench_test.go, GOMAXPROCS =
threads) and bench/torch_lm.py (torch.set_num_threads(threads),
OMP_WAIT_POLICY=PASSIVE so that idle OpenMP threads sleep instead of spinning)
twice, once with OpenBLAS as installed (OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset: OpenBLAS picks its kernels by CPU detection) and once
with OPENBLAS_CORETYPE=SkylakeX. The order of the three is reversed on every
other rep, so that a drift in the machine's load falls on both sides. Each
rep gives one ratio modref / torch per OpenBLAS setting; the script prints
the min, median and max of those ratios, the median times, modref's
allocs/op, and the peak resident memory of every process (getrusage of the
child, ru_maxrss). The load average is printed before and after each rep.

Every process is pinned to as many cores as it has threads (the last ones
the script may use: with 1 thread, one core; --no-pin leaves the scheduler
free), and both sides report CPU time beside wall time: modref's benchmark
its process's CPU time per step (cpu-ns/op, internal/benchcpu), torch_lm.py
the median of time.process_time per step. On a shared machine a wall time
includes waiting for a core, which CPU time does not; a pinned process
cannot be helped by a second core either. Each rep gives a wall-time and a
CPU-time ratio. PyTorch runs with ATEN_CPU_CAPABILITY=avx512 where the CPU
has AVX-512 (PyTorch 1.13 otherwise dispatches its own kernels no higher
than AVX2 there; --aten sets another capability, --aten "" leaves it unset).

modref's time is the mean over --steps timed steps after one warm-up step
(the benchmark's own); PyTorch's is the median of --steps steps after two
warm-up steps. With --markdown the tables are also written to FILE as a
Markdown fragment for docs/performance.md.
"""

import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GO_NAMES = {
    "small": "small-d64-h4-S64-B4-L4",
    "medium": "medium-d256-h8-S256-B8-L4",
    "large": "large-d512-h8-S1024-B2-L4",
}
VARIANTS = ["dense", "mod-every-other-12.5", "mod-all-12.5"]
CORETYPES = [("as installed", None), ("SkylakeX", "SkylakeX")]


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def run(cmd, env, cpus=None):
    """Runs cmd (on the cores cpus, if given) and returns its stdout, exiting
    with its output if it fails."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, preexec_fn=pin)
    if p.returncode != 0:
        sys.exit("bench/paired.py: %s failed (exit %d):\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def wrapped(cmd):
    """cmd run under a Python wrapper that prints the child's peak RSS (KB) last.

    ru_maxrss of RUSAGE_CHILDREN is the largest over all children so far, so
    each child gets a wrapper of its own and the value is that child's alone.
    """
    code = ("import resource,subprocess,sys;"
            "r=subprocess.run(sys.argv[1:]).returncode;"
            "print('maxrss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
            "sys.exit(r)")
    return [sys.executable, "-c", code] + cmd


def base_env(threads, aten=None):
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if aten:
        env["ATEN_CPU_CAPABILITY"] = aten
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["GOMAXPROCS"] = str(threads)
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def go_step(binary, size, variant, threads, steps, cpus):
    bench = "^BenchmarkModStep$/^%s$/^%s$" % (GO_NAMES[size], variant)
    out = run(wrapped([binary, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", "%dx" % steps,
                       "-test.benchmem"]), base_env(threads), cpus)
    m = re.search(r"^BenchmarkModStep/\S+\s+\d+\s+(.*)$", out, re.M)
    if not m:
        sys.exit("bench/paired.py: no benchmark line in:\n" + out)
    metrics = {unit: float(v) for v, unit in re.findall(r"([\d.e+-]+) (\S+)", m.group(1))}
    return {"ms": metrics["ns/op"] / 1e6, "cpu_ms": metrics["cpu-ns/op"] / 1e6, "flops": metrics["flops/dense"],
            "allocs": int(metrics["allocs/op"]), "rss": maxrss(out)}


def torch_step(size, variant, threads, steps, coretype, cpus, aten):
    env = base_env(threads, aten)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = run(wrapped(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_lm.py"), "--threads", str(threads),
                       "--sizes", size, "--variants", variant, "--steps", str(steps)]), env, cpus)
    core = re.search(r"OpenBLAS core (\S+)", out).group(1)
    m = re.search(r"([\d.]+) ms/step\s+([\d.]+) cpu-ms/step", out)
    return {"ms": float(m.group(1)), "cpu_ms": float(m.group(2)), "core": core, "rss": maxrss(out),
            "header": out.splitlines()[0]}


def maxrss(out):
    return int(re.search(r"^maxrss_kb (\d+)", out, re.M).group(1)) / 1024


def parse_args(argv):
    opts = {"sizes": ["small", "medium", "large"], "variants": VARIANTS, "threads": [1, 2], "reps": 3,
            "steps": {"small": 10, "medium": 3, "large": 2}, "markdown": None, "pin": True, "aten": default_aten()}
    it = iter(argv)
    for a in it:
        if a in ("--sizes", "--variants"):
            opts[a[2:]] = next(it).split(",")
        elif a == "--threads":
            opts["threads"] = [int(t) for t in next(it).split(",")]
        elif a == "--reps":
            opts["reps"] = int(next(it))
        elif a == "--steps":
            for kv in next(it).split(","):
                k, v = kv.split("=")
                opts["steps"][k] = int(v)
        elif a == "--markdown":
            opts["markdown"] = next(it)
        elif a == "--aten":
            opts["aten"] = next(it)
        elif a == "--no-pin":
            opts["pin"] = False
        else:
            sys.exit(__doc__.strip().split("\n\n")[1])
    return opts


def default_aten():
    """avx512 where the CPU has AVX-512F, else None (PyTorch's own choice)."""
    with open("/proc/cpuinfo") as f:
        return "avx512" if any(l.startswith("flags") and " avx512f" in l for l in f) else None


def pinned(threads, pin):
    """The cores a process of threads threads runs on: the last threads of
    those this script may use, or None (any) without pinning."""
    if not pin:
        return None
    cores = sorted(os.sched_getaffinity(0))
    return set(cores[-threads:])


def spread(xs):
    return "%.2f / %.2f / %.2f" % (min(xs), statistics.median(xs), max(xs))


def main(argv):
    opts = parse_args(argv)
    binary = os.path.join("/tmp", "modref-paired-mod.test.%d" % os.getpid())
    subprocess.run(["go", "test", "-c", "-o", binary, "./mod/"], cwd=ROOT, check=True)
    go_version = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    print("# %s UTC, load average %s, %s; ATEN_CPU_CAPABILITY=%s; %s" % (
        time.strftime("%Y-%m-%d %H:%M", time.gmtime()), loadavg(), go_version, opts["aten"] or "(unset)",
        "each process pinned to as many cores as threads" if opts["pin"] else "not pinned"))
    rows = []
    headers = set()
    try:
        for threads in opts["threads"]:
            for size in opts["sizes"]:
                for variant in opts["variants"]:
                    steps = opts["steps"][size]
                    cpus = pinned(threads, opts["pin"])
                    go, torch = [], {c: [] for c, _ in CORETYPES}
                    for rep in range(opts["reps"]):
                        load0 = loadavg()
                        jobs = [("go", None)] + list(CORETYPES)
                        if rep % 2:
                            jobs.reverse()
                        for name, coretype in jobs:
                            if name == "go":
                                go.append(go_step(binary, size, variant, threads, steps, cpus))
                            else:
                                r = torch_step(size, variant, threads, steps, coretype, cpus, opts["aten"])
                                headers.add(r["header"])
                                torch[name].append(r)
                        print("  %s %s %d thread(s) rep %d: modref %.1f ms (CPU %.1f), torch %s ms; load %s -> %s" % (
                            size, variant, threads, rep, go[-1]["ms"], go[-1]["cpu_ms"],
                            " / ".join("%.1f (CPU %.1f, %s)" % (torch[c][-1]["ms"], torch[c][-1]["cpu_ms"], torch[c][-1]["core"])
                                       for c, _ in CORETYPES),
                            load0, loadavg()))
                        sys.stdout.flush()
                    rows.append(summarise(threads, size, variant, go, torch))
                    print(text_row(rows[-1]))
                    sys.stdout.flush()
    finally:
        os.remove(binary)
    end = "# done %s UTC, load average %s" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), loadavg())
    print(end)
    for h in sorted(headers):
        print("# " + h)
    if opts["markdown"]:
        with open(opts["markdown"], "w") as f:
            f.write(markdown(rows, opts))
    return 0


def summarise(threads, size, variant, go, torch):
    row = {"threads": threads, "size": size, "variant": variant, "flops": go[0]["flops"],
           "go_ms": statistics.median(g["ms"] for g in go), "go_cpu_ms": statistics.median(g["cpu_ms"] for g in go),
           "allocs": max(g["allocs"] for g in go),
           "go_rss": max(g["rss"] for g in go), "torch": {}}
    for c, _ in CORETYPES:
        ts = torch[c]
        row["torch"][c] = {"ms": statistics.median(t["ms"] for t in ts),
                           "cpu_ms": statistics.median(t["cpu_ms"] for t in ts),
                           "ratios": [g["ms"] / t["ms"] for g, t in zip(go, ts)],
                           "cpu_ratios": [g["cpu_ms"] / t["cpu_ms"] for g, t in zip(go, ts)],
                           "rss": max(t["rss"] for t in ts), "core": ts[0]["core"]}
    return row


def text_row(r):
    parts = ["%s %-21s %d thr: modref %9.1f ms, CPU %9.1f ms (%d allocs, %.0f MB)" % (
        r["size"], r["variant"], r["threads"], r["go_ms"], r["go_cpu_ms"], r["allocs"], r["go_rss"])]
    for c, t in r["torch"].items():
        parts.append("torch[%s] %9.1f ms, CPU %9.1f ms (%.0f MB), modref/torch min/med/max wall %s, CPU %s" % (
            t["core"], t["ms"], t["cpu_ms"], t["rss"], spread(t["ratios"]), spread(t["cpu_ratios"])))
    return "\n    ".join(parts)


def markdown(rows, opts):
    out = []
    for threads in opts["threads"]:
        rs = [r for r in rows if r["threads"] == threads]
        if not rs:
            continue
        cores = {c: rs[0]["torch"][c]["core"] for c, _ in CORETYPES}
        out.append("%d thread%s (GOMAXPROCS=%d; torch.set_num_threads(%d), OMP_WAIT_POLICY=PASSIVE; ATEN_CPU_CAPABILITY=%s; %s):\n" % (
            threads, "s" if threads > 1 else "", threads, threads, opts["aten"] or "unset",
            "pinned to %d core%s" % (threads, "s" if threads > 1 else "") if opts["pin"] else "not pinned"))
        out.append("| size | variant | FLOPs / dense | modref ms (CPU ms) | modref CPU time / dense | torch ms (CPU ms), %s | modref / torch wall, min / median / max | modref / torch CPU, min / median / max | torch ms (CPU ms), %s | modref / torch wall | modref / torch CPU | allocs/op | peak RSS MB, modref / torch |"
                   % tuple("OpenBLAS %s (%s)" % (c, cores[c]) if c != cores[c] else "OpenBLAS " + c for c, _ in CORETYPES))
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        dense = {r["size"]: r["go_cpu_ms"] for r in rs if r["variant"] == "dense"}
        for r in rs:
            tr = [r["torch"][c] for c, _ in CORETYPES]
            rel = "%.3f" % (r["go_cpu_ms"] / dense[r["size"]]) if r["size"] in dense else "-"
            out.append("| %s | %s | %.3f | %.1f (%.1f) | %s | %.1f (%.1f) | %s | %s | %.1f (%.1f) | %s | %s | %d | %.0f / %.0f |" % (
                r["size"], r["variant"], r["flops"], r["go_ms"], r["go_cpu_ms"], rel,
                tr[0]["ms"], tr[0]["cpu_ms"], spread(tr[0]["ratios"]), spread(tr[0]["cpu_ratios"]),
                tr[1]["ms"], tr[1]["cpu_ms"], spread(tr[1]["ratios"]), spread(tr[1]["cpu_ratios"]),
                r["allocs"], r["go_rss"], max(t["rss"] for t in tr)))
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
