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
        *extra,
    ]
    if "--jobs" not in extra:
        cmd += ["--jobs", "1"]
    full_env = dict(os.environ)
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)
    doc = json.loads(out.read_text()) if out.exists() else {"results": []}
    return {(r["op"], r["dtype"]): r for r in doc["results"]}, proc.returncode, proc.stdout + proc.stderr


def test_sweep_classifies_every_outcome(tmp_path):
    # One run of the CLI (worker starts are what cost time here): CPU against
    # CPU is all native, except an injected wrong result (mul: fail), a worker
    # abort (sub: crash) and a hang (div: crash by timeout); the items after
    # them in the same chunk still run.
    ops = ["add", "mul", "sub", "sum", "nn.functional.conv2d", "div.no_rounding_mode",
           "linalg.svd", "index_put", "nn.functional.dropout"]
    # Two chunks of 8 on two workers: the crash is in one, the hang in the other.
    results, rc, out = sweep(
        tmp_path, ops, dtypes="float32,int64",
        extra=("--check", "--timeout", "10", "--jobs", "2", "--chunk-size", "8"),
        env={compare.FAULT_ENV: "mul", "LOOM_CONFORMANCE_CRASH": "sub:float32",
             "LOOM_CONFORMANCE_HANG": "div.no_rounding_mode:int64"},
    )
    assert set(results) == {
        (op, d) for op in ops for d in ("float32", "int64")
        if d in catalog.cpu_dtypes(catalog.op_db()[op])
    }
    status = {k: r["status"] for k, r in results.items()}
    assert status.pop(("mul", "float32")) == "fail"
    assert status.pop(("mul", "int64")) == "fail"
    assert "forward" in results[("mul", "float32")]["message"]
    assert status.pop(("sub", "float32")) == "crash"
    assert "SIGABRT" in results[("sub", "float32")]["message"]
    assert status.pop(("div.no_rounding_mode", "int64")) == "crash"
    assert "timeout" in results[("div.no_rounding_mode", "int64")]["message"]
    assert set(status.values()) == {"native"}, status
    add = results[("add", "float32")]["checks"]
    # add has a gradient, an in-place and an out= variant: all of them ran.
    assert {"forward", "backward", "inplace", "out"} <= set(add)
    assert all(c["pass"] > 0 and c["fail"] == 0 for c in add.values())
    # --check exits non-zero on any wrong result, listed or not.
    assert rc == 1 and "FAIL mul float32" in out
    md = (tmp_path / "REPORT.md").read_text()
    n = len(results)
    assert "native pass %d / fallback pass 0 / fail 2 / error 0 / crash 2 out of %d" % (n - 4, n) in md


@needs_loom
def test_injected_fault_on_loom_is_a_fail(tmp_path):
    results, rc, out = sweep(
        tmp_path, ["add", "mul"], device="loom", env={compare.FAULT_ENV: "mul"}, extra=("--check",),
    )
    assert results[("mul", "float32")]["status"] == "fail", results
    assert results[("add", "float32")]["status"] in ("native", "fallback"), results
    assert rc == 1 and "FAIL mul float32" in out


def test_device_exception_is_an_error():
    # Nothing computed on the meta device can be copied back: every check errs.
    r = compare.run_item("add", "float32", "meta", 2)
    assert r["status"] == "error", r
    assert "forward" in r["message"]


def test_judgement_of_exceptions():
    op = catalog.op_db()["add"]
    run = compare.ItemRun(op, "float32", "cpu", 1, fault=False)
    c = run.check("forward")
    run._judge(c, 0, (None, ValueError("x")), (None, ValueError("y")))  # both raise: pass
    run._judge(c, 0, (None, ValueError("x")), (None, TypeError("y")))   # not loom's fault
    assert (c.passed, c.failed, c.errors) == (2, 0, 0)
    run._judge(c, 1, (None, RuntimeError("bad input")), (1.0, None))    # the device should raise
    assert c.failed == 1
    run._judge(c, 2, (1.0, None), (None, RuntimeError("no kernel")))    # the device raised
    assert c.errors == 1
    run._judge(c, 3, (1.0, None), (1.5, None))                          # wrong value
    assert c.failed == 2


def test_float64_reference_decides_a_mismatch():
    import torch

    # The CPU's float32 rounding left 2e-5 where exact arithmetic gives 0
    # (layer_norm over one element): a device result of 0 is the better one.
    cpu, ref = torch.tensor([-2.4e-5, 1.0]), torch.tensor([0.0, 1.0], dtype=torch.float64)
    assert compare.within_reference(torch.tensor([0.0, 1.0]), cpu, ref, 1.3e-6, 1e-5)
    # A device result further from the reference than the CPU's is wrong.
    assert not compare.within_reference(torch.tensor([0.0, 1.1]), cpu, ref, 1.3e-6, 1e-5)
    assert not compare.within_reference(torch.tensor([4.8e-5, 1.0]), cpu, ref, 1.3e-6, 1e-5)


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


def test_fast_subset_checks_every_op_before_a_second_pair(tmp_path):
    """The ratchet's subset takes each expected op's cheapest pair before any
    op gets its second, skips pairs over the cheap limit and stays within the
    budget of recorded seconds (the common ops at float32 come first, free)."""
    from tests.conformance import fast

    ops = ["abs", "exp", "sin", "cos", "tan"]
    expected = {(op, d) for op in ops for d in ("float64", "int64", "bfloat16")}
    seconds = {(op, "float64"): 0.01 for op in ops}
    seconds.update({(op, "int64"): 0.02 for op in ops})
    seconds.update({(op, "bfloat16"): 0.9 for op in ops})  # over CHEAP_S: never in the subset
    seconds[("tan", "float64")] = 0.04  # tan's cheapest pair is its int64 one
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"op": o, "dtype": d, "seconds": s}
                                            for (o, d), s in seconds.items()]}))
    common = fast.common_pairs()
    extra = fast.fast_pairs(expected, str(path), budget_s=0.09)[len(common):]
    # round 1: every op's cheapest pair (0.06 s); then 0.03 s buys one second pair
    assert sorted(extra[:5]) == sorted((op, "int64" if op == "tan" else "float64") for op in ops)
    assert len(extra) == 6 and extra[5][1] == "int64" and extra[5][0] != "tan"
    everything = fast.fast_pairs(expected, str(path), budget_s=100)[len(common):]
    assert set(everything) == {p for p in expected if p[1] != "bfloat16"}
