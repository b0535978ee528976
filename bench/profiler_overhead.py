"""What the profiler costs loom: training steps and tiny ops, profiler off
and on, side by side in one run.

    python -m bench.profiler_overhead [--quick] [--rounds N] [--threads N]
                                      [--workloads a,b] [--baseline DIR] [--current DIR]
                                      [--json PATH]

Each workload of bench/workloads.py (default: overhead_add, mlp_train,
gpt_train) runs in a worker process, in three configurations whose order is
shuffled every round:

    off     no profiler
    cpu     torch.profiler with ProfilerActivity.CPU (PyTorch's own cost)
    loom    torch.profiler with CPU and PrivateUse1: loom's trace rings on

A round times a few iterations of each between synchronizations; the
profiler's start and its processing of the trace at the end are outside the
timed part (they are reported apart). Times are medians over rounds; an
overhead is the median over rounds of the ratio to `off` in the same round
(paired, so that the machine's drift cancels).

--baseline DIR adds a second worker importing torch_loom from DIR (a build
without the runtime's tracing, e.g. the previous commit's python/ folder), run
alternately with the current one, configuration `off` only: what the
tracing hooks cost when the profiler is off. --current DIR takes the build
measured from DIR instead of this tree's python/ folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = ("overhead_add", "mlp_train", "gpt_train")
CONFIGS = ("off", "cpu", "loom")


# ---- the worker ----------------------------------------------------------------------

def _worker(args) -> int:
    import torch

    import torch_loom  # noqa: F401  (autoload is off in workers: the chosen build)
    from torch.profiler import ProfilerActivity, profile

    from bench import workloads as W

    torch.set_num_threads(args.threads)
    device = torch.device("loom")
    sync = torch.loom.synchronize
    ctx = W.Ctx(device=device, backend=None, quick=args.quick, sync=sync)
    by_name = {w.name: w for w in W.WORKLOADS}
    prepared, units = {}, {}
    for name in args.workloads.split(","):
        if name not in by_name:
            raise SystemExit(f"profiler_overhead: no workload named {name!r} in bench/workloads.py")
        p = by_name[name].build(ctx)
        p.fn()  # warm: plans, workspaces, allocator
        sync()
        prepared[name] = p
        units[name] = by_name[name].unit
    activities = {"cpu": [ProfilerActivity.CPU],
                  "loom": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]}
    configs = args.configs.split(",")
    print(json.dumps({"ready": True, "torch_loom": torch_loom.__file__}), flush=True)
    rng = random.Random(0)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        result = {}
        order = [(w, c) for w in prepared for c in configs]
        rng.shuffle(order)
        for name, config in order:
            fn, iters = prepared[name].fn, args.iters
            prof = None
            if config != "off":
                prof = profile(activities=activities[config])
                prof.__enter__()
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            elapsed = (time.perf_counter() - t0) / iters
            processing = 0.0
            if prof is not None:
                t1 = time.perf_counter()
                prof.__exit__(None, None, None)
                processing = time.perf_counter() - t1
            result[f"{name}/{config}"] = {"seconds": elapsed, "processing": processing,
                                          "items": prepared[name].items, "unit": units[name]}
        print(json.dumps(result), flush=True)
    return 0


# ---- the parent ----------------------------------------------------------------------

class Worker:
    def __init__(self, args, python_path: Path, configs: str):
        env = dict(os.environ)
        env["LOOM_NUM_THREADS"] = str(args.threads)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), str(ROOT),
                                                          env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "bench.profiler_overhead", "--worker",
               "--threads", str(args.threads), "--iters", str(args.iters),
               "--workloads", args.workloads, "--configs", configs]
        if args.quick:
            cmd.append("--quick")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            raise SystemExit(f"profiler_overhead: the worker for {python_path} did not start")
        self.module = hello["torch_loom"]

    def round(self) -> dict:
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("profiler_overhead: a worker died")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _fmt_time(seconds: float, items: int, unit: str) -> str:
    # Per op for the tiny-op workloads, per call (a training step) otherwise.
    return f"{seconds / items * 1e6:.2f} us/op" if unit == "op" else f"{seconds * 1e3:.1f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the workloads' small sizes")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3, help="iterations timed per round")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--baseline", type=Path, help="a python/ folder holding a torch_loom build "
                    "to compare with, profiler off")
    ap.add_argument("--current", type=Path, default=ROOT / "python",
                    help="the python/ folder of the build to measure")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)

    current = Worker(args, args.current, ",".join(CONFIGS))
    baseline = Worker(args, args.baseline, "off") if args.baseline else None
    samples: dict[str, list[float]] = {}
    processing: dict[str, list[float]] = {}
    items: dict[str, int] = {}
    units: dict[str, str] = {}
    for r in range(args.rounds):
        # Alternate which build goes first, so that neither always runs
        # on a machine the other has just warmed or loaded.
        pair = [("", current), ("baseline:", baseline)]
        if r % 2:
            pair.reverse()
        for prefix, worker in pair:
            if worker is None:
                continue
            for key, v in worker.round().items():
                samples.setdefault(prefix + key, []).append(v["seconds"])
                processing.setdefault(prefix + key, []).append(v["processing"])
                items[key.split("/")[0]] = v["items"]
                units[key.split("/")[0]] = v["unit"]
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    current.close()
    if baseline:
        baseline.close()

    med = {k: statistics.median(v) for k, v in samples.items()}

    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b])) - 1
    results = {"threads": args.threads, "rounds": args.rounds, "iters": args.iters,
               "quick": args.quick, "torch_loom": current.module,
               "baseline": baseline.module if baseline else None, "workloads": {}}
    head = ["workload", "off", "profiler CPU", "profiler CPU+loom", "CPU overhead",
            "CPU+loom overhead", "loom vs CPU profiler", "trace processing"]
    if baseline:
        head += ["baseline off", "off vs baseline"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in args.workloads.split(","):
        off, cpu, loom = (med[f"{name}/{c}"] for c in CONFIGS)
        row = {"off_s": off, "cpu_s": cpu, "loom_s": loom,
               "cpu_overhead": paired(f"{name}/cpu", f"{name}/off"),
               "loom_overhead": paired(f"{name}/loom", f"{name}/off"),
               "loom_vs_cpu_profiler": paired(f"{name}/loom", f"{name}/cpu"),
               "loom_processing_s": statistics.median(processing[f"{name}/loom"]),
               "items": items[name],
               "samples": {c: samples[f"{name}/{c}"] for c in CONFIGS}}
        cells = [name] + [_fmt_time(t, items[name], units[name]) for t in (off, cpu, loom)]
        cells += [f"{row['cpu_overhead']:+.1%}", f"{row['loom_overhead']:+.1%}",
                  f"{row['loom_vs_cpu_profiler']:+.1%}",
                  f"{row['loom_processing_s'] * 1e3:.0f} ms"]
        if baseline:
            base = med[f"baseline:{name}/off"]
            row["baseline_off_s"] = base
            row["off_vs_baseline"] = paired(f"{name}/off", f"baseline:{name}/off")
            row["samples"]["baseline_off"] = samples[f"baseline:{name}/off"]
            cells += [_fmt_time(base, items[name], units[name]), f"{row['off_vs_baseline']:+.1%}"]
        results["workloads"][name] = row
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
