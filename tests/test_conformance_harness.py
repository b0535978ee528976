"""The conformance harness itself: does it classify right, and does it survive
crashes and hangs? Runs against the CPU (CPU vs CPU must be all native pass),
the meta device (nothing can be read back: errors) and, when it is built, loom
(a deliberately wrong loom result must be a fail)."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from tests.conformance import catalog, compare, report, runner  # noqa: E402


def loom_available():
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, torch_loom; torch.empty(2, device='loom')"],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"},
    )
    return probe.returncode == 0


LOOM = loom_available()
needs_loom = pytest.mark.skipif(not LOOM, reason="the loom device is not built")


def sweep(tmp_path, ops, device="cpu", dtypes="float32", env=None, extra=()):
    """Run the CLI as `make conformance` does; return ({(op, dtype): result}, rc, output)."""
    out = tmp_path / "results.json"
    cmd = [
        sys.executable, "-m", "tests.conformance.run", "--ops", ",".join(ops),
        "--dtypes", dtypes, "--device", device, "--json", str(out),
        "--report", str(tmp_path / "REPORT.md"), "--expected", str(tmp_path / "expected.txt"),
        "--jobs", "1", *extra,
    ]
    full_env = dict(os.environ)
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)
    doc = json.loads(out.read_text()) if out.exists() else {"results": []}
    return {(r["op"], r["dtype"]): r for r in doc["results"]}, proc.returncode, proc.stdout + proc.stderr


def test_cpu_against_cpu_is_native(tmp_path):
    ops = ["add", "sum", "nn.functional.conv2d", "linalg.svd", "index_put", "nn.functional.dropout"]
    results, rc, out = sweep(tmp_path, ops, dtypes="float32,int64")
    assert rc == 0, out
    assert set(results) == {
        (op, d) for op in ops for d in ("float32", "int64")
        if d in catalog.cpu_dtypes(catalog.op_db()[op])
    }
    assert {r["status"] for r in results.values()} == {"native"}, results
    add = results[("add", "float32")]["checks"]
    # add has a gradient, an in-place and an out= variant: all of them ran.
    assert {"forward", "backward", "inplace", "out"} <= set(add)
    assert all(c["pass"] > 0 and c["fail"] == 0 for c in add.values())
    md = (tmp_path / "REPORT.md").read_text()
    assert "native pass %d / fallback pass 0 / fail 0 / error 0 / crash 0" % len(results) in md


@pytest.mark.parametrize("device", ["cpu", pytest.param("loom", marks=needs_loom)])
def test_injected_fault_is_a_fail(tmp_path, device):
    results, rc, out = sweep(
        tmp_path, ["add", "mul", "sum"], device=device,
        env={compare.FAULT_ENV: "mul"}, extra=("--check",),
    )
    assert results[("mul", "float32")]["status"] == "fail", results
    assert "forward" in results[("mul", "float32")]["message"]
    assert results[("add", "float32")]["status"] in ("native", "fallback")
    # --check exits non-zero on any wrong result, listed or not.
    assert rc == 1 and "FAIL mul float32" in out


def test_crash_costs_one_item_and_the_chunk_goes_on(tmp_path):
    results, rc, out = sweep(
        tmp_path, ["add", "mul", "sub"], env={"LOOM_CONFORMANCE_CRASH": "mul"},
    )
    assert rc == 0, out
    assert results[("mul", "float32")]["status"] == "crash"
    assert "SIGABRT" in results[("mul", "float32")]["message"]
    assert results[("add", "float32")]["status"] == "native"
    assert results[("sub", "float32")]["status"] == "native"


def test_hang_is_a_crash_by_timeout(tmp_path):
    results, rc, out = sweep(
        tmp_path, ["add", "mul", "sub"], env={"LOOM_CONFORMANCE_HANG": "mul"},
        extra=("--timeout", "5"),
    )
    assert results[("mul", "float32")]["status"] == "crash"
    assert "timeout" in results[("mul", "float32")]["message"]
    assert results[("sub", "float32")]["status"] == "native"


def test_device_exception_is_an_error():
    # Nothing computed on the meta device can be copied back: every check errs.
    r = compare.run_item("add", "float32", "meta", 2)
    assert r["status"] == "error", r
    assert "forward" in r["message"]


def test_judgement_of_exceptions():
    op = catalog.op_db()["add"]
    run = compare.ItemRun(op, "float32", "cpu", 1, fault=False)
    c = run.check("forward")
    run._judge(c, 0, None, ValueError("x"), None, ValueError("y"))  # both raise: pass
    run._judge(c, 0, None, ValueError("x"), None, TypeError("y"))   # not loom's fault
    assert (c.passed, c.failed, c.errors) == (2, 0, 0)
    run._judge(c, 1, None, RuntimeError("bad input"), 1.0, None)    # the device should raise
    assert c.failed == 1
    run._judge(c, 2, 1.0, None, None, RuntimeError("no kernel"))     # the device raised
    assert c.errors == 1
    run._judge(c, 3, 1.0, None, 1.5, None)                           # wrong value
    assert c.failed == 2


def test_copy_keeps_strides_and_storage_sharing():
    import torch

    base = torch.arange(24.0).reshape(4, 6)
    for t in (base.t(), base[:, 1::2], base[1:, 2:], base[:1].expand(5, 6)):
        c = compare.copy_tensor(t, "cpu")
        assert c.stride() == t.stride() and torch.equal(c, t)
        assert c.data_ptr() != t.data_ptr()
    leaf = torch.ones(3, requires_grad=True)
    c = compare.copy_tensor(leaf, "cpu")
    assert c.requires_grad and c.is_leaf


def test_expectation_file_ratchet(tmp_path):
    results = [
        {"op": "add", "dtype": "float32", "status": "native"},
        {"op": "mul", "dtype": "float32", "status": "fallback"},
        {"op": "sub", "dtype": "float32", "status": "fail", "message": "m"},
        {"op": "div", "dtype": "float32", "status": "native"},
    ]
    path = tmp_path / "expected.txt"
    report.write_expected(str(path), {("add", "float32"), ("mul", "float32"), ("cos", "int64")})
    expected = report.read_expected(str(path))
    assert expected == {("add", "float32"), ("mul", "float32"), ("cos", "int64")}
    regressions, fails = report.ratchet(expected, results)
    assert [(r["op"], r["status"]) for r in regressions] == [("mul", "fallback")]
    assert [r["op"] for r in fails] == ["sub"]
    # Update: what ran is listed iff native; what did not run is kept.
    assert report.updated_expected(expected, results) == {
        ("add", "float32"), ("div", "float32"), ("cos", "int64")
    }


def test_every_op_is_run_or_listed_with_a_reason():
    items, not_run = catalog.work_items()
    ran = {op for op, _ in items}
    assert ran | set(not_run) == set(catalog.op_db())
    assert not ran & set(not_run)
    assert all(reason for reason in not_run.values())


def test_startup_failure_stops_the_run(tmp_path):
    with pytest.raises(runner.WorkerStartupError):
        runner.run_items([("add", "float32")], "no_such_device", jobs=1)
