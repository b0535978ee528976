"""Configurations of one workload timed step by step in alternation in one
process: for differences smaller than the run-to-run spread of separate
`bench.run` invocations (this machine's memory bandwidth and step times
drift by tens of percent between minutes; rounds that alternate see the
same drift).

    python -m bench.interleaved gpt_train 30 eager,inductor
    python -m bench.interleaved cnn_train_cl 30 cpu,eager

A configuration is "eager" or a torch.compile backend name, on loom; with
the prefix "cpu" ("cpu" alone is CPU eager, "cpu:inductor" the CPU
compiled) the same workload runs on the CPU. Each is built from
`bench/workloads.py` and warmed up; then each round gives every
configuration a turn, in alternating order: as many calls as take about
20 ms (one step of a training workload), after a pause in which the other
turn's threads go idle (a CPU step's OpenMP threads spin for milliseconds
after it and would slow the loom turn after it). Printed per
configuration: its median time per call and its speed relative to the
first configuration (the median and interquartile range of the per-round ratios)."""
from __future__ import annotations

import statistics
import sys
import time

import torch

from bench import workloads as W

SETTLE_S = 0.05


def _context(config: str) -> W.Ctx:
    """The workload context of one configuration name (see the module doc)."""
    if config == "cpu" or config.startswith("cpu:"):
        backend = config[4:] or "eager"
        return W.Ctx(torch.device("cpu"), None if backend == "eager" else backend, False, lambda: None)
    return W.Ctx(torch.device("loom"), None if config == "eager" else config, False,
                 torch.loom.synchronize)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    name, reps, configs = argv[0], int(argv[1]), argv[2].split(",")
    import torch_loom  # noqa: F401  (the loom device)

    preps, syncs = {}, {}
    for c in configs:
        ctx = _context(c)
        preps[c], syncs[c] = W.BY_NAME[name].build(ctx), ctx.sync
        for _ in range(3):
            preps[c].fn()
        ctx.sync()
    # Calls per turn: enough for ~20 ms, so the first call's wake-up of the
    # threads is a small part of a short workload's turn.
    inner = {}
    for c in configs:
        t0 = time.perf_counter()
        preps[c].fn()
        syncs[c]()
        inner[c] = max(1, round(0.02 / max(time.perf_counter() - t0, 1e-6)))
    times: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(reps):
        for c in configs if r % 2 == 0 else configs[::-1]:
            # the previous turn's threads stop spinning (OpenMP's spin for
            # the next parallel region lasts milliseconds) before this one
            time.sleep(SETTLE_S)
            syncs[c]()
            t0 = time.perf_counter()
            for _ in range(inner[c]):
                preps[c].fn()
            syncs[c]()
            times[c].append((time.perf_counter() - t0) * 1e3 / inner[c])
    base = configs[0]
    for c in configs:
        ratios = sorted(b / a for a, b in zip(times[c], times[base]))
        q = len(ratios) // 4
        print(f"{name} {c}: {statistics.median(times[c]):.2f} ms, speed vs {base}: median "
              f"{statistics.median(ratios):.3f} (IQR {ratios[q]:.3f}-{ratios[-q - 1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
