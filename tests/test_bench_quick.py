"""Smoke test of the benchmark runner: every workload once, at a tiny size, in
a subprocess, writing to a temporary directory. Checks the outputs exist and
are well formed; asserts nothing about speed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_bench(out: Path, *args, env_extra=None, timeout=240):
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(out), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return proc


def load(out: Path) -> dict:
    from bench.report import validate

    results = json.loads((out / "results.json").read_text())
    assert validate(results) == []
    return results


@pytest.fixture(scope="module")
def quick_all(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_quick")
    proc = run_bench(out, "--configs", "cpu_eager,loom_eager")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, load(out)


def test_quick_writes_three_files(quick_all):
    out, _ = quick_all
    for name in ("results.json", "RESULTS.md", "results.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_covers_every_workload_and_config(quick_all):
    from bench.harness import CONFIGS
    from bench.workloads import WORKLOADS

    _, results = quick_all
    assert [w["name"] for w in results["workloads"]] == [w.name for w in WORKLOADS]
    assert [c["name"] for c in results["configs"]] == [c.name for c in CONFIGS]
    assert results["quick"] is True
    for w in results["workloads"]:
        base = w["results"]["cpu_eager"]
        assert base["status"] == "ok", (w["name"], base)
        assert base["ratio_vs_cpu_eager"] == 1.0
        assert base["median_s"] > 0
        # the physical-limit comparison is made where a limit applies
        if base.get("limit") and base["limit"] in results["limits"]:
            assert base["percent_of_limit"] > 0
        assert w["results"]["cpu_inductor"]["status"] == "skipped"
        loom = w["results"]["loom_eager"]
        if results["configs"][2]["available"]:
            # skipped: a workload that cannot run on loom, with the reason
            assert loom["status"] in ("ok", "error", "crashed", "timeout", "skipped"), loom
            assert loom["status"] == "ok" or loom["reason"], loom
            if loom["status"] == "ok":
                assert loom["ratio_vs_cpu_eager"] > 0
                assert loom["check"]["status"] in ("ok", "mismatch")
        else:
            assert loom["status"] == "unavailable" and loom["reason"]


def test_quick_reports_machine_and_limits(quick_all):
    out, results = quick_all
    m = results["machine"]
    assert m["cpu_model"] and m["cores"] >= 1 and isinstance(m["flags"], list)
    assert results["torch_version"].startswith("2.")
    assert int(results["threads"]["loom"]) == results["threads"]["torch"]
    fma = results["limit_programs"]["peak_fma"]
    bw = results["limit_programs"]["stream_bw"]
    assert "error" not in fma and "error" not in bw, (fma, bw)
    assert {r["threads"] for r in fma["results"]} >= {1}
    assert "fma_fp32" in results["limits"] or "avx512f" not in m["flags"]
    assert {"bw_read", "bw_copy", "bw_triad"} <= set(results["limits"])
    md = (out / "RESULTS.md").read_text()
    assert m["cpu_model"] in md and results["torch_version"] in md
    assert "## Ratios per workload" in md


def test_quick_compiled_configs(tmp_path):
    """The compile configurations run next to the eager ones: Inductor on the
    CPU and on loom; the loom backend, or it is reported not available with
    a reason."""
    proc = run_bench(tmp_path, "--workloads", "add_16M,sum_16M", "--no-limits")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = load(tmp_path)
    for w in results["workloads"]:
        ind = w["results"]["cpu_inductor"]
        assert ind["status"] == "ok", ind
        assert ind["check"]["status"] == "ok", ind["check"]
        assert ind["ratio_vs_cpu_eager"] > 0
        li = w["results"]["loom_inductor"]
        assert li["status"] == "ok", li
        assert li["check"]["status"] == "ok", li["check"]
        lc = w["results"]["loom_compile"]
        assert lc["status"] in ("ok", "unavailable", "error", "crashed", "timeout")
        assert lc["status"] == "ok" or lc["reason"]


def test_quick_times_each_resnet_layer(quick_all):
    from bench.workloads import RESNET18_CONVS

    out, results = quick_all
    (w,) = [w for w in results["workloads"] if w["name"] == "conv_resnet18"]
    for name in ("cpu_eager", "loom_eager"):
        r = w["results"][name]
        if r["status"] == "ok":
            assert len(r["extra"]) == len(RESNET18_CONVS)
            assert all(v > 0 for v in r["extra"].values())
    text = (out / "RESULTS.md").read_text()
    first = next(iter(w["results"]["cpu_eager"]["extra"]))
    assert f"| {first} |" in text  # one row per layer in the phases table
