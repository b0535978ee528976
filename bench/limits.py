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


def summarize(programs: dict, threads: int) -> dict:
    """The limits each workload is judged against, at `threads` threads:
    {limit name: {"value": number, "unit": ..., "source": ...}}."""
    limits = {}
    fma = programs.get("peak_fma", {}).get("results", [])
    bw = programs.get("stream_bw", {}).get("results", [])

    def best(rows, kernels, unit, key):
        vals = [(r[key], r["kernel"]) for r in rows
                if r.get("available") and r.get("threads") == threads and r["kernel"] in kernels]
        if not vals:
            return None
        v, k = max(vals)
        return {"value": v, "unit": unit, "source": f"{k}, {threads} thread(s)"}

    for name, rows, kernels, unit, key in (
            (FMA_FP32, fma, ("fp32_avx512_fma",), "GFLOP/s", "gflops"),
            (FMA_BF16, fma, ("bf16_avx512_dp", "bf16_amx"), "GFLOP/s", "gflops"),
            (BW_READ, bw, ("read",), "GB/s", "gbps"),
            (BW_COPY, bw, ("copy",), "GB/s", "gbps"),
            (BW_TRIAD, bw, ("triad",), "GB/s", "gbps")):
        entry = best(rows, kernels, unit, key)
        if entry is not None:
            limits[name] = entry
    return limits
