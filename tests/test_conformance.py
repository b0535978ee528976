"""The conformance ratchet: the fast subset of the op_db sweep on loom.

Fails if a pair of conformance/expected_native.txt is no longer a native pass
(it fell back, raised, crashed or went wrong) or if any op of the subset gives
a wrong result. After moving ops to native, update the file with
`make conformance-update` (or `python -m tests.conformance.run --ops ... --update-expected`).
"""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.conformance import catalog, report, run  # noqa: E402


def _loom_probe():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    p = subprocess.run(
        [sys.executable, "-c", "import torch, torch_loom; torch.empty(2, device='loom')"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    return p.returncode == 0, (p.stderr or p.stdout)[-2000:]


def test_expectation_file_names_real_pairs():
    db = catalog.op_db()
    bad = [
        (op, d) for op, d in report.read_expected(run.EXPECTED)
        if op not in db or d not in catalog.cpu_dtypes(db[op])
    ]
    assert not bad, "pairs in %s that op_db does not have: %s" % (run.EXPECTED, bad)


def test_fast_subset_keeps_native_passes_and_gives_no_wrong_result(tmp_path):
    expected = report.read_expected(run.EXPECTED)
    ok, why = _loom_probe()
    if not ok:
        if expected:
            pytest.fail("the loom device does not load, and %d pairs are expected to pass "
                        "natively on it:\n%s" % (len(expected), why))
        pytest.skip("the loom device is not built")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.conformance.run", "--fast", "--check", "--device", "loom",
         "--json", str(tmp_path / "fast.json")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    out = proc.stdout + proc.stderr[-4000:]
    assert proc.returncode == 0, (
        "conformance ratchet: a listed native pass regressed or an op is wrong "
        "(rerun: python -m tests.conformance.run --fast --check):\n" + out
    )
