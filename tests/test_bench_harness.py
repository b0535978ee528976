"""The benchmark runner survives failing items: an exception, a crashed
worker and a hung worker each cost one (workload, configuration) pair, which
is reported with the reason, and the run goes on."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_failures_are_reported_and_the_run_continues(tmp_path):
    env = dict(os.environ)
    env["LOOM_BENCH_FAULT"] = ("overhead_add/cpu_eager=crash,add_16M/cpu_eager=raise,"
                               "sum_16M/cpu_eager=hang,layer_norm/cpu_eager=skip")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--no-limits", "--out", str(tmp_path),
         "--configs", "cpu_eager", "--workloads", "overhead_add,add_16M,sum_16M,softmax,layer_norm",
         "--item-timeout", "10"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    from bench.report import validate

    assert validate(results) == []
    got = {w["name"]: w["results"]["cpu_eager"] for w in results["workloads"]}
    assert got["overhead_add"]["status"] == "crashed"
    assert "signal" in got["overhead_add"]["reason"]
    assert got["add_16M"]["status"] == "error"
    assert "injected fault" in got["add_16M"]["reason"]
    assert got["sum_16M"]["status"] == "timeout"
    assert got["softmax"]["status"] == "ok"
    assert got["layer_norm"]["status"] == "skipped"
    assert got["layer_norm"]["reason"] == "injected skip in layer_norm/cpu_eager"
    md = (tmp_path / "RESULTS.md").read_text()
    assert "injected fault" in md and "timeout" in md and "injected skip" in md


def test_derive_and_headline():
    from bench.report import derive, headline

    results = {
        "limits": {"fma_fp32": {"value": 100.0, "unit": "GFLOP/s", "source": "x"}},
        "workloads": [{"name": "w", "results": {
            "cpu_eager": {"status": "ok", "median_s": 2.0, "items": 4, "flops": 100e9, "limit": "fma_fp32"},
            "cpu_inductor": {"status": "ok", "median_s": 1.0, "min_s": 0.8, "items": 4, "flops": 100e9,
                             "limit": "fma_fp32"},
            "loom_eager": {"status": "unavailable", "reason": "r"},
            "loom_compile": {"status": "error", "reason": "r"},
        }}],
    }
    derive(results)
    r = results["workloads"][0]["results"]
    assert r["cpu_eager"]["ratio_vs_cpu_eager"] == 1.0
    assert r["cpu_inductor"]["ratio_vs_cpu_eager"] == 2.0
    assert r["cpu_inductor"]["gflops"] == 100.0
    assert r["cpu_inductor"]["percent_of_limit"] == 100.0
    assert r["cpu_inductor"]["percent_of_limit_best"] == 125.0
    assert r["cpu_eager"]["percent_of_limit_best"] == 50.0  # no min_s: the median
    assert r["cpu_eager"]["seconds_per_item"] == 0.5
    h = headline(results)
    assert h["cpu_inductor"] == {"geomean_ratio": 2.0, "workloads": 1}
    assert h["loom_eager"] == {"geomean_ratio": None, "workloads": 0}


def test_compare_flags_wrong_results():
    import torch

    from bench.harness import compare

    ref = [torch.tensor([1.0, 2.0, 4.0])]
    assert compare([torch.tensor([1.0, 2.0, 4.0])], ref, 1e-6)["status"] == "ok"
    assert compare([torch.tensor([1.0, 2.0, 4.5])], ref, 1e-3)["status"] == "mismatch"
    assert compare([torch.tensor([1.0, 2.0])], ref, 1e-3)["status"] == "mismatch"
    assert compare([torch.tensor([1.0, float("nan"), 4.0])], ref, 1e-3)["status"] == "mismatch"


def test_limits_scale_compute_with_cores_but_not_bandwidth():
    from bench.limits import summarize

    programs = {
        "peak_fma": {"results": [
            {"kernel": "fp32_avx512_fma", "threads": 1, "available": True, "gflops": 250.0},
            {"kernel": "fp32_avx512_fma", "threads": 2, "available": True, "gflops": 300.0},
            {"kernel": "bf16_avx512_dp", "threads": 1, "available": True, "gflops": 400.0},
            {"kernel": "bf16_avx512_dp", "threads": 2, "available": True, "gflops": 990.0},
            {"kernel": "bf16_amx", "threads": 1, "available": False, "reason": "no AMX"},
        ]},
        "stream_bw": {"results": [
            {"kernel": "read", "threads": 1, "available": True, "gbps": 40.0},
            {"kernel": "read", "threads": 2, "available": True, "gbps": 30.0},
            {"kernel": "triad", "threads": 2, "available": True, "gbps": 45.0},
        ]},
    }
    limits = summarize(programs, 2)
    assert limits["fma_fp32"]["value"] == 500.0
    assert limits["fma_bf16"]["value"] == 990.0
    assert limits["bw_read"]["value"] == 40.0
    assert limits["bw_triad"]["value"] == 45.0
    assert "bw_copy" not in limits
    assert summarize(programs, 1)["fma_bf16"]["value"] == 400.0


def test_bandwidth_limits_take_streaming_stores_and_the_later_run():
    from bench.limits import summarize

    start = {"stream_bw": {"results": [
        {"kernel": "triad", "threads": 2, "available": True, "gbps": 45.0},
        {"kernel": "triad_nt", "threads": 2, "available": True, "gbps": 60.0},
        {"kernel": "copy_nt", "threads": 2, "available": False, "reason": "no AVX-512"},
        {"kernel": "read", "threads": 2, "available": True, "gbps": 50.0},
    ]}}
    end = {"stream_bw": {"results": [
        {"kernel": "read", "threads": 2, "available": True, "gbps": 55.0},
        {"kernel": "triad_nt", "threads": 2, "available": True, "gbps": 58.0},
    ]}}
    assert summarize(start, 2)["bw_triad"]["value"] == 60.0
    assert "triad_nt" in summarize(start, 2)["bw_triad"]["source"]
    both = summarize(start, 2, end)
    assert both["bw_read"]["value"] == 55.0 and both["bw_triad"]["value"] == 60.0
    assert "bw_copy" not in both


def test_a_slow_warm_up_call_does_not_shrink_the_calls_per_sample(monkeypatch):
    """Warm-up calls that hit a hiccup must not leave samples of a few
    calls, each then paying for the wake-up after the idle settle. The
    harness runs on a simulated clock, so the test does not depend on how
    long a sleep takes on a loaded machine."""
    import types

    from bench import harness
    from bench.harness import Plan, Timed

    now = [0.0]

    def sleep(s):
        now[0] += s

    monkeypatch.setattr(harness, "time", types.SimpleNamespace(
        perf_counter=lambda: now[0], time=lambda: now[0], sleep=sleep))

    # call number -> its stall: the last warm-up call, both, or one past a
    # whole sample; every other call takes 0.2 ms
    for stalls in ({3: 0.005}, {2: 0.005, 3: 0.005}, {3: 0.02}):
        calls = []

        def fn():
            calls.append(1)
            sleep(stalls.get(len(calls), 0.0002))

        t = Timed(fn, lambda: None, Plan(quick=False, min_sample_s=0.01))
        t.start()
        # a call of 0.2 ms needs 50 per 10 ms sample, and a block of 25 fills
        # half of one; the stalled estimate alone gave 2
        assert 25 <= t.inner <= 64, (stalls, t.inner)
        t.sample()
        assert len(t.samples) == 1 and abs(t.samples[0] - 0.0002) < 1e-9


def test_the_checked_output_is_the_first_calls():
    """A workload may return a view of state every call updates (an
    optimizer's parameters); configurations warm up a different number of
    times, so the output compared with CPU eager is copied right after the
    first call."""
    import torch
    from bench.harness import Plan, Timed

    state = torch.zeros(4)

    def step():
        state.add_(1.0)
        return state[:2]

    for quick in (True, False):
        state.zero_()
        out = Timed(step, lambda: None, Plan(quick=quick, min_sample_s=0.001)).start()
        assert state[0].item() > 1 or quick
        assert len(out) == 1 and torch.equal(out[0], torch.ones(2))


def test_memory_workloads_take_a_new_input_per_call_and_keep_outputs():
    """add_16M, softmax, layer_norm and fuse_chain10_16M cycle through
    RING inputs and keep each output until the ring comes round: calls
    queued on a loom stream then share no memory, and a fused group cannot
    read one input for several calls (add_16M measured 35x CPU eager so)."""
    import torch
    from bench.workloads import BY_NAME, RING, Ctx

    ctx = Ctx(torch.device("cpu"), None, True, lambda: None)
    for name in ("add_16M", "softmax", "layer_norm", "fuse_chain10_16M"):
        fn = BY_NAME[name].build(ctx).fn
        outs = [fn() for _ in range(RING)]
        assert len({o.data_ptr() for o in outs}) == RING, name  # all alive, none reused
        for i in range(RING):
            for j in range(i):
                assert not torch.equal(outs[i], outs[j]), (name, i, j)
        again = fn()  # the first input again: the first call's result
        assert torch.equal(again, outs[0]), name


def test_interleaved_configurations_name_device_and_backend():
    import torch
    import torch_loom  # noqa: F401
    from bench.interleaved import _context

    cpu, cpu_ind, eager, loom = (_context(c) for c in ("cpu", "cpu:inductor", "eager", "loom"))
    assert (cpu.device.type, cpu.backend) == ("cpu", None)
    assert (cpu_ind.device.type, cpu_ind.backend) == ("cpu", "inductor")
    assert (eager.device.type, eager.backend) == ("loom", None)
    assert (loom.device.type, loom.backend) == ("loom", "loom")
    assert eager.sync is torch.loom.synchronize
