"""Cold and warm compile times of the training steps, loom's backend beside
Inductor (on loom and on the CPU):

    python -m bench.compile_times [--workloads mlp_train,cnn_train,gpt_train]
        [--configs loom_compile,loom_inductor,cpu_inductor] [--out DIR]

Each measurement runs in a fresh process: it builds the workload (as
bench.run does), times its first call (tracing, compiling, one step) and
then a steady call; the compile time is the difference. *Cold*: empty
caches (LOOM_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR in a new temporary
directory); *warm*: a second process over the caches the cold one filled
(what a user's second run of the same script pays). Writes
compile_times.json and prints a table."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, time
import torch
from bench.harness import build_in_process
prepared, sync = build_in_process(sys.argv[1], sys.argv[2])
t0 = time.perf_counter(); prepared.fn(); sync(); first = time.perf_counter() - t0
steady = []
for _ in range(3):
    t0 = time.perf_counter(); prepared.fn(); sync(); steady.append(time.perf_counter() - t0)
print(json.dumps({"first_s": first, "step_s": min(steady)}))
"""


def _measure(workload, config, cache_root):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(LOOM_CACHE_DIR=str(cache_root / "loom"),
               TORCHINDUCTOR_CACHE_DIR=str(cache_root / "inductor"),
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "python"),
                                          env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, workload, config], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0][:300]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["compile_s"] = max(r["first_s"] - r["step_s"], 0.0)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp_train,cnn_train,gpt_train")
    ap.add_argument("--configs", default="loom_compile,loom_inductor,cpu_inductor")
    ap.add_argument("--out", default=str(REPO / "bench"))
    args = ap.parse_args(argv)
    results = {}
    for w in args.workloads.split(","):
        for c in args.configs.split(","):
            with tempfile.TemporaryDirectory(prefix="compile_times_") as tmp:
                root = Path(tmp)
                os.chmod(root, 0o700)
                cold = _measure(w, c, root)
                warm = _measure(w, c, root)
            results[f"{w}/{c}"] = {"cold": cold, "warm": warm}
            print(f"{w:12s} {c:14s} cold {cold.get('compile_s', float('nan')):7.2f} s   "
                  f"warm {warm.get('compile_s', float('nan')):7.2f} s   "
                  f"step {warm.get('step_s', float('nan')) * 1e3:8.1f} ms"
                  + (f"   {cold.get('error') or warm.get('error')}"
                     if "error" in cold or "error" in warm else ""), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_times.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
