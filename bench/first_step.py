"""A user's first training steps, loom eager beside CPU eager:

    python -m bench.first_step [--workloads cnn_train,gpt_train,mlp_train]
        [--configs cpu_eager,loom_eager,loom_eager+LOOM_POPULATE=1] [--reps 3]
        [--threads N] [--out DIR]

Each measurement runs in a fresh process (as bench.compile_times does): it
builds the workload (model, optimizer and data on the device, synchronized)
before any timing, then times the first call of the step (forward, backward,
the optimizer's step with its state created), the second and the third, each
to a synchronize. Around each step it reads the process's minor page faults
(getrusage: every thread's, the device's workers included) and its resident
memory, so the table shows what a first step pays for fresh memory: a page
fault and the kernel zeroing the page, for every page nothing touched yet.

A configuration may carry environment settings after a `+`
(`loom_eager+LOOM_POPULATE=1`: loom eager with fresh segments populated as
the host driver maps them, rather than left to fault in where kernels first
touch them). The table gives the median over `--reps`
processes of each number (the configurations' processes alternate), and
the first step's time over CPU eager's (below 1: loom is faster). Writes
first_step.json."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, resource, sys, time
import torch
from bench.harness import build_in_process
torch.set_num_threads(int(sys.argv[3]))
prepared, sync = build_in_process(sys.argv[1], sys.argv[2])
sync()

def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return r.ru_minflt, rss_pages * resource.getpagesize(), r.ru_stime

steps = []
for _ in range(3):
    f0, m0, k0 = usage()
    t0 = time.perf_counter(); prepared.fn(); sync(); t = time.perf_counter() - t0
    f1, m1, k1 = usage()
    steps.append({"s": t, "faults": f1 - f0, "rss_growth": m1 - m0, "sys_s": k1 - k0})
print(json.dumps({"steps": steps}))
"""


def _parse_config(spec: str) -> tuple[str, dict]:
    name, *settings = spec.split("+")
    env = {}
    for s in settings:
        key, sep, value = s.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench.first_step: bad setting {s!r} in {spec!r} (want NAME=VALUE)")
        env[key] = value
    return name, env


def _measure(workload: str, spec: str, threads: int) -> dict:
    name, settings = _parse_config(spec)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(settings)
    env.update(LOOM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), str(REPO / "python"),
                                                        env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _CHILD, workload, name, str(threads)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], step: int, key: str) -> float:
    return statistics.median(r["steps"][step][key] for r in runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="cnn_train,gpt_train,mlp_train")
    ap.add_argument("--configs", default="cpu_eager,loom_eager,loom_eager+LOOM_POPULATE=1")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per item (median)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads (default: LOOM_NUM_THREADS or all cores)")
    ap.add_argument("--out", default=str(REPO / "bench"))
    args = ap.parse_args(argv)
    threads = args.threads or int(os.environ.get("LOOM_NUM_THREADS", "0") or 0) or os.cpu_count()
    configs = args.configs.split(",")
    for c in configs:
        _parse_config(c)
    print(f"threads {threads}, {args.reps} processes per item, medians; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'workload':10s} {'config':30s} {'step 1':>9s} {'step 2':>9s} {'step 3':>9s} "
          f"{'faults 1':>9s} {'faults 2':>9s} {'sys 1':>8s} {'sys 2':>8s} {'RSS+ 1':>8s} "
          f"{'1st/CPU':>8s}", flush=True)
    results: dict = {"threads": threads, "reps": args.reps, "items": {}}
    for w in args.workloads.split(","):
        cpu_first = None
        # the configurations alternate, so that a change of the machine's load
        # falls on all of them alike
        by_config = {c: [] for c in configs}
        for _ in range(args.reps):
            for c in configs:
                by_config[c].append(_measure(w, c, threads))
        for c in configs:
            runs = by_config[c]
            errors = [r["error"] for r in runs if "error" in r]
            runs = [r for r in runs if "error" not in r]
            item = {"runs": runs}
            if errors:
                item["errors"] = errors
            results["items"][f"{w}/{c}"] = item
            if not runs:
                print(f"{w:10s} {c:30s} error: {errors[0]}", flush=True)
                continue
            med = {f"{k}_{i + 1}": _median(runs, i, k) for i in range(3)
                   for k in ("s", "faults", "rss_growth", "sys_s")}
            item["median"] = med
            if c == "cpu_eager":
                cpu_first = med["s_1"]
            ratio = med["s_1"] / cpu_first if cpu_first else float("nan")
            item["first_vs_cpu"] = ratio
            print(f"{w:10s} {c:30s} {med['s_1'] * 1e3:7.1f}ms {med['s_2'] * 1e3:7.1f}ms "
                  f"{med['s_3'] * 1e3:7.1f}ms {med['faults_1']:9.0f} {med['faults_2']:9.0f} "
                  f"{med['sys_s_1'] * 1e3:6.1f}ms {med['sys_s_2'] * 1e3:6.1f}ms "
                  f"{med['rss_growth_1'] / 2**20:6.1f}M {ratio:7.2f}x", flush=True)
    results["load_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_step.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
