"""Shared pytest set-up: the loom device must be importable, and tests that
need a fresh process (environment variables read at start-up, autoload,
fork) run Python snippets in a subprocess."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gemm_variant_here(variant):
    """Whether loom's GEMM can run `variant` ("avx512", "amx") here: the
    CPU has its instructions and neither LOOM_GEMM nor LOOM_CPU_FEATURES
    picks a variant below it (the variants go generic < avx512 <
    avx512bf16 < amx; the feature cap "avx2" leaves the GEMM generic)."""
    order = ["generic", "avx512", "avx512bf16", "amx"]
    chosen = os.environ.get("LOOM_GEMM", "amx")
    if chosen in order and order.index(chosen) < order.index(variant):
        return False
    cap = os.environ.get("LOOM_CPU_FEATURES", "native")
    cap = "generic" if cap == "avx2" else cap
    if cap in order and order.index(cap) < order.index(variant):
        return False
    flag = {"avx512": "avx512f", "avx512bf16": "avx512_bf16", "amx": "amx_bf16"}[variant]
    try:
        with open("/proc/cpuinfo") as f:
            return flag in f.read().split()
    except OSError:
        return False


def run_python(code, env=None, timeout=300, check=True):
    """Runs `code` in a fresh interpreter with extra `env`; returns the
    CompletedProcess (stdout/stderr as text). With `check`, a non-zero exit
    fails the calling test with the child's output."""
    # The child starts from a clean loom configuration: only what `env` sets.
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("LOOM_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO_ROOT, "python"), full_env.get("PYTHONPATH", "")]
    )
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"subprocess exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


# What a digest script may use: `h`, a SHA-256, and `add(*tensors)`, which
# feeds it each tensor's bytes.
DIGEST_PREAMBLE = """import hashlib, torch
h = hashlib.sha256()
def add(*ts):
    for t in ts:
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
"""


def digest_with_threads(code, threads):
    """The "DIGEST ..." line that `code` prints (after DIGEST_PREAMBLE), run with LOOM_NUM_THREADS =
    `threads` and the CPU fallback refused: a thread-count test compares
    the lines of two thread counts."""
    proc = run_python(DIGEST_PREAMBLE + textwrap.dedent(code),
                      env={"LOOM_NUM_THREADS": str(threads), "LOOM_FALLBACK": "error"})
    line = [l for l in proc.stdout.splitlines() if l.startswith("DIGEST")]
    assert line, proc.stdout + proc.stderr
    return line[0]


@pytest.fixture(autouse=True)
def _restore_fallback_mode():
    """A test that changes torch.loom's fallback mode does not leak it."""
    loom = getattr(torch, "loom", None)
    mode = loom.get_fallback_mode() if loom is not None else None
    yield
    if mode is not None:
        loom.set_fallback_mode(mode)


@pytest.fixture(autouse=True)
def _finish_region_compiles():
    """Adaptive eager's compiles (compiled regions) a test started finish
    before the next test, whose JIT counters they would otherwise change."""
    yield
    fusion = getattr(getattr(torch, "loom", None), "fusion", None)
    if fusion is not None and hasattr(fusion, "wait_regions"):
        fusion.wait_regions(120)


@pytest.fixture
def no_fallback():
    """Runs a test with the CPU fallback raising, so every op it reaches must
    have a native loom kernel, and checks that none ran on the CPU. (The
    autouse fixture above restores the mode.)"""
    torch.loom.set_fallback_mode("error")
    torch.loom.clear_fallback_ops()
    yield
    assert torch.loom.fallback_ops() == {}


@pytest.fixture
def fresh_compile(no_fallback):
    """no_fallback for a test that compiles: Dynamo's caches cleared first,
    so the test compiles its own graphs."""
    torch._dynamo.reset()
    yield


@pytest.fixture
def loom():
    """The loom device module, after checking the device exists."""
    assert hasattr(torch, "loom"), "import torch did not register the loom device"
    assert torch.loom.is_available()
    return torch.loom


@pytest.fixture
def py():
    return run_python


def pytest_sessionstart(session):
    """The suite tests the loom device: a missing device is a failure, never
    a reason to skip."""
    if not (hasattr(torch, "loom") and torch.loom.is_available()):
        raise pytest.UsageError(
            "the loom device is not available: run `make build` (or `make test`)")
