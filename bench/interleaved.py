"""Two or more loom configurations of one workload, timed step by step in
alternation in one process: for differences smaller than the run-to-run
spread of separate `bench.run` invocations.

    python -m bench.interleaved gpt_train 30 eager,inductor

Each configuration ("eager" or a torch.compile backend name) is built from
`bench/workloads.py` and warmed up; then each round runs one step of every
configuration, in alternating order. Printed per configuration: its median
step time and its speed relative to the first configuration (the median and
interquartile range of the per-round ratios)."""
from __future__ import annotations

import statistics
import sys
import time

import torch

from bench import workloads as W


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    name, reps, configs = argv[0], int(argv[1]), argv[2].split(",")
    import torch_loom  # noqa: F401  (the loom device)

    sync = torch.loom.synchronize
    preps = {}
    for c in configs:
        ctx = W.Ctx(torch.device("loom"), None if c == "eager" else c, False, sync)
        preps[c] = W.BY_NAME[name].build(ctx)
        for _ in range(3):
            preps[c].fn()
        sync()
    times: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(reps):
        for c in configs if r % 2 == 0 else configs[::-1]:
            sync()
            t0 = time.perf_counter()
            preps[c].fn()
            sync()
            times[c].append((time.perf_counter() - t0) * 1e3)
    base = configs[0]
    for c in configs:
        ratios = sorted(b / a for a, b in zip(times[c], times[base]))
        q = len(ratios) // 4
        print(f"{name} {c}: {statistics.median(times[c]):.2f} ms, speed vs {base}: median "
              f"{statistics.median(ratios):.3f} (IQR {ratios[q]:.3f}-{ratios[-q - 1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
