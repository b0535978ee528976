"""torch_loom.compiler.jit: C source compiled at run time into kernels that
launch on loom tensors; the on-disk cache across processes (a second process
runs no compiler, a corrupt entry is recompiled, two processes compiling
one key at once both succeed); no compiler means one warning and library
kernels."""

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

from conftest import REPO_ROOT
from torch_loom.compiler import jit

ELEMENTWISE = r"""
#include "loom/kernel_abi.h"
/* out = x * y + z, elementwise over float32 (contiguous). */
int muladd(const loom_kernel_args *a, int64_t begin, int64_t end) {
  const float *x = a->tensors[0].data, *y = a->tensors[1].data, *z = a->tensors[2].data;
  float *out = a->tensors[3].data;
  for (int64_t i = begin; i < end; ++i) out[i] = x[i] * y[i] + z[i];
  return 0;
}
/* out *= s (a float scalar), then + k (an int scalar). */
int scale_shift(const loom_kernel_args *a, int64_t begin, int64_t end) {
  float *out = a->tensors[0].data;
  const float s = (float)a->scalars[0].f, k = (float)a->scalars[1].i;
  for (int64_t i = begin; i < end; ++i) out[i] = out[i] * s + k;
  return 0;
}
"""

requires_cc = pytest.mark.skipif(not jit._C._jit_compiler_available()[0],
                                 reason="no C compiler on this machine")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory of this user, for this process and its children."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LOOM_CACHE_DIR", str(path))
    return path


def _unique_source(tag):
    """ELEMENTWISE under kernel names and a comment of its own: another key,
    other registry names, nothing shared with other tests."""
    return f"/* {tag} */\n" + ELEMENTWISE, {"muladd": f"test.{tag}.muladd",
                                           "scale_shift": f"test.{tag}.scale_shift"}


@requires_cc
def test_compiled_kernel_matches_torch_bitwise(cache, no_fallback):
    src, names = _unique_source(f"bitwise{os.getpid()}")
    module = jit.compile(src, names)
    assert module.origin == "compiled" and module.persisted
    assert set(module.kernels) == set(names.values())
    assert (cache / f"{module.key}.so").is_file()

    g = torch.Generator().manual_seed(0)
    x, y, z = (torch.randn(10007, generator=g) for _ in range(3))
    out = torch.empty(10007, device="loom")
    jit.launch(names["muladd"], [x.to("loom"), y.to("loom"), z.to("loom"), out], grain=1000)
    expected = x * y + z  # two roundings, as the kernel compiled without contraction
    assert torch.equal(out.cpu(), expected)

    jit.launch(names["scale_shift"], [out], [0.5, 3])
    assert torch.equal(out.cpu(), expected * 0.5 + 3)

    # The same source under the same names: the same module, no compiler.
    before = jit.stats()["compiler_invocations"]
    assert jit.compile(src, names) is module
    assert jit.stats()["compiler_invocations"] == before

    module.unload()
    with pytest.raises(NotImplementedError, match=names["muladd"]):
        jit.launch(names["muladd"], [out, out, out, out])


@requires_cc
def test_compile_runs_off_the_calling_thread(cache):
    src, names = _unique_source(f"async{os.getpid()}")
    job = jit.compile_async(src, names)
    module = job.result()
    assert job.done()
    assert module.origin == "compiled"
    t = torch.arange(8, dtype=torch.float32, device="loom")
    jit.launch(names["scale_shift"], [t], [2.0, 1])
    assert torch.equal(t.cpu(), torch.arange(8, dtype=torch.float32) * 2 + 1)
    module.unload()


@requires_cc
def test_bad_input_is_named():
    with pytest.raises(jit.CompileError, match="undeclared_thing"):
        jit.compile("int broken(void) { return undeclared_thing; }", ["broken"])
    with pytest.raises(jit.CompileError, match="'absent'"):
        jit.compile(ELEMENTWISE, [("absent", "test.jit.absent")])
    with pytest.raises(TypeError, match="kernels"):
        jit.compile(ELEMENTWISE, [3])
    with pytest.raises(NotImplementedError, match="test.no.such.kernel"):
        jit.launch("test.no.such.kernel", [torch.ones(1, device="loom")])
    src, names = _unique_source(f"bad{os.getpid()}")
    module = jit.compile(src, names)
    with pytest.raises(RuntimeError, match="expected a tensor on loom"):
        jit.launch(names["scale_shift"], [torch.ones(4)], [1.0, 0])
    with pytest.raises(TypeError, match="scalar 0"):
        jit.launch(names["scale_shift"], [torch.ones(4, device="loom")], ["x", 0])
    with pytest.raises(ValueError, match="grain"):
        jit.launch(names["scale_shift"], [torch.ones(4, device="loom")], [1.0, 0], grain=0)
    module.unload()


COMPILE_AND_REPORT = """
import json, os, sys, time, torch
from torch_loom.compiler import jit
sources = json.loads(sys.argv[1])
if len(sys.argv) > 2:  # say it is ready, then wait for the go
    open(sys.argv[2], "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
        time.sleep(0.002)
origins, after = [], []
for i, (src, names) in enumerate(sources):
    m = jit.compile(src, names)
    origins.append(m.origin)
    after.append(jit.stats())
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty(64, device="loom")
    jit.launch(names["muladd"], [x.to("loom"), x.to("loom"), x.to("loom"), out])
    assert torch.equal(out.cpu(), x * x + x), f"source {i} computed wrong values"
print(json.dumps({"origins": origins, "stats": after}))
"""


def _child(sources, cache, *gate):
    """A fresh interpreter compiling `sources` with `cache` and launching
    their kernels; `gate` = (ready file, go file) holds it before compiling."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO_ROOT, "python"),
                                         env.get("PYTHONPATH", "")])
    env["LOOM_CACHE_DIR"] = str(cache)
    args = [sys.executable, "-c", textwrap.dedent(COMPILE_AND_REPORT), json.dumps(sources)]
    return subprocess.Popen(args + [str(g) for g in gate], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"child failed:\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


@requires_cc
def test_second_process_runs_no_compiler_and_recompiles_a_corrupt_entry(cache):
    """This process fills the cache with two sources; a fresh process then
    finds the first without running any compiler, and compiles the second,
    whose entry was corrupted, afresh."""
    kept = _unique_source(f"kept{os.getpid()}")
    broken = _unique_source(f"broken{os.getpid()}")
    kept_module = jit.compile(*kept)
    broken_module = jit.compile(*broken)
    entry = cache / f"{broken_module.key}.so"
    data = bytearray(entry.read_bytes())
    data[len(data) // 3] ^= 0xFF
    # A new file renamed over the entry: this process still runs the code
    # mapped from the old one, which an in-place write would change under it.
    corrupt = entry.with_name(entry.name + ".corrupt")
    corrupt.write_bytes(bytes(data))
    corrupt.chmod(0o600)
    corrupt.replace(entry)

    report = _report(_child([kept, broken], cache))
    assert report["origins"] == ["cached", "compiled"]
    after_kept, after_broken = report["stats"]
    assert after_kept["compiler_invocations"] == 0
    assert after_kept["cache_hits"] == 1 and after_kept["cache_misses"] == 0
    assert after_broken["entries_rejected"] == 1
    assert after_broken["cache_misses"] == 1
    # Only the object was compiled: the compiler's identity was cached too.
    assert after_broken["compiler_invocations"] == 1
    kept_module.unload()
    broken_module.unload()


@requires_cc
def test_two_processes_compiling_one_key_both_succeed(cache, tmp_path):
    """Two processes compile the same source at once (both imported, then
    released together by a file): both succeed, and the lock on the key lets
    only one of them compile."""
    src = _unique_source(f"race{os.getpid()}")
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    procs = [_child([src], cache, ready[i], go) for i in range(2)]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    go.touch()
    reports = [_report(p) for p in procs]
    assert sorted(r["origins"][0] for r in reports) == ["cached", "compiled"]
    assert sum(r["stats"][-1]["cache_misses"] for r in reports) == 1


def test_no_compiler_warns_once(monkeypatch):
    monkeypatch.setenv("LOOM_CC", "/nonexistent/cc")
    monkeypatch.setattr(jit, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not jit.available()
        assert not jit.available()
        for _ in range(2):
            with pytest.raises(jit.CompilerUnavailable, match="LOOM_CC=/nonexistent/cc"):
                jit.compile(ELEMENTWISE, ["muladd"])
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert "no C compiler" in messages[0] and "library kernels" in messages[0]
    assert jit.stats()["compiler_invocations"] >= 0  # readable without a compiler


@requires_cc
def test_refused_cache_dir_compiles_privately_and_warns_once(tmp_path, monkeypatch):
    """A cache directory open to everyone is refused: kernels still compile
    (into a private directory, kept nowhere), with one warning saying why."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(open_dir))
    monkeypatch.setattr(jit, "_warned", set())
    refusals = jit.stats()["cache_refusals"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = [jit.compile(*_unique_source(f"open{i}{os.getpid()}")) for i in range(2)]
    assert all(not m.persisted and m.origin == "compiled" for m in modules)
    assert jit.stats()["cache_refusals"] >= refusals + 2
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "0777" in messages[0] and str(open_dir) in messages[0], messages
    assert list(open_dir.iterdir()) == []
    t = torch.ones(4, device="loom")
    jit.launch(modules[0].kernels[1], [t], [2.0, 1])
    assert torch.equal(t.cpu(), torch.full((4,), 3.0))
    for m in modules:
        m.unload()
