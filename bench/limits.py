"""Physical limits of the machine, from the C microbenchmarks in bench/c.

`make build` builds them into build/bench/. When that build is missing (for
instance while another part of the tree does not compile) they are compiled
here directly with the system C compiler: they need nothing but libc and
pthreads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.workloads import BW_COPY, BW_READ, BW_TRIAD, FMA_BF16, FMA_FP32

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ("peak_fma", "stream_bw")


def _binary(name: str, scratch: Path) -> tuple[Path | None, str | None]:
    built = ROOT / "build" / "bench" / name
    source = ROOT / "bench" / "c" / f"{name}.c"
    if built.is_file() and os.access(built, os.X_OK) and (
            not source.exists() or built.stat().st_mtime >= source.stat().st_mtime):
        return built, None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no build/bench binary and no C compiler"
    out = scratch / name
    proc = subprocess.run([cc, "-std=c11", "-O3", "-pthread", str(source), "-o", str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"compiling {source.name} failed: {proc.stderr.strip()[-400:]}"
    return out, None


def run_programs(threads: int, quick: bool, timeout_s: float = 180) -> dict:
    """Runs both programs; returns {name: parsed JSON or {"error": ...}}."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="loom-bench-") as tmp:
        for name in PROGRAMS:
            path, err = _binary(name, Path(tmp))
            if path is None:
                results[name] = {"error": err}
                continue
            args = [str(path), "--threads", str(threads)] + (["--quick"] if quick else [])
            try:
                proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
                data = json.loads(proc.stdout)
                if proc.returncode != 0 and "error" not in data:
                    data["error"] = f"exit status {proc.returncode}"
                data["binary"] = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else "compiled on the fly"
                results[name] = data
            except subprocess.TimeoutExpired:
                results[name] = {"error": f"timed out after {timeout_s:.0f} s"}
            except (json.JSONDecodeError, OSError) as exc:
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return results


def summarize(programs: dict, threads: int, *later: dict) -> dict:
    """The limits each workload is judged against, at `threads` threads:
    {limit name: {"value": number, "unit": ..., "source": ...}}.

    Arithmetic peak scales with cores (each has the same FMA units), so the
    FMA limit is the larger of the `threads`-thread measurement and
    `threads` times the one-thread one: on a busy machine the multi-thread
    run is the one most likely to be disturbed. Bandwidth does not scale so:
    its limit is the best measured at any thread count up to `threads`, with
    normal or non-temporal stores, whichever moved more. `later` are more
    runs of the programs (the bench measures again when it ends); each limit
    is the best of all runs, since a shared machine only ever makes a
    measurement slower."""
    limits = {}
    runs = (programs,) + later
    fma = [r for p in runs for r in p.get("peak_fma", {}).get("results", [])]
    bw = [r for p in runs for r in p.get("stream_bw", {}).get("results", [])]

    def rows(table, kernels, key):
        return [(r[key], r["kernel"], r["threads"]) for r in table
                if r.get("available") and r["kernel"] in kernels and r.get("threads", 0) <= threads]

    for name, kernels in ((FMA_FP32, ("fp32_avx512_fma",)), (FMA_BF16, ("bf16_avx512_dp", "bf16_amx"))):
        found = rows(fma, kernels, "gflops")
        if not found:
            continue
        candidates = [(v * threads / t if t == 1 else v, k, t) for v, k, t in found if t in (1, threads)]
        if not candidates:
            continue
        v, k, t = max(candidates)
        source = f"{k}, {threads} thread(s)" if t == threads else f"{k}, {threads} x the 1-thread figure"
        limits[name] = {"value": v, "unit": "GFLOP/s", "source": source}
    for name, kernels in ((BW_READ, ("read",)), (BW_COPY, ("copy", "copy_nt")),
                          (BW_TRIAD, ("triad", "triad_nt"))):
        found = rows(bw, kernels, "gbps")
        if found:
            v, k, t = max(found)
            limits[name] = {"value": v, "unit": "GB/s", "source": f"stream {k}, {t} thread(s)"}
    return limits
