"""Smoke test of bench/profiler_overhead.py: one round of the tiny-op
workload in its worker, profiler off and on, at the quick size. Checks the
table and the JSON are there and well formed; asserts nothing about speed."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_one_round_writes_the_table_and_json(tmp_path):
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.profiler_overhead", "--quick", "--rounds", "1",
         "--iters", "1", "--threads", "1", "--workloads", "overhead_add", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| overhead_add |" in proc.stdout and "CPU+loom overhead" in proc.stdout
    results = json.loads(out.read_text())
    row = results["workloads"]["overhead_add"]
    assert row["items"] > 0
    for config in ("off", "cpu", "loom"):
        assert row[f"{config}_s"] > 0 and len(row["samples"][config]) == 1
    assert results["baseline"] is None
