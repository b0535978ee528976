"""The profiler on loom: torch.profiler (Kineto with loom's plugin) sees the
device's kernels, fills and copies, timed where they ran and linked to the
operators that enqueued them; the legacy autograd profiler times operators
with loom events; and with the profiler off, the runtime records nothing."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

import torch_loom
from conftest import run_python

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).to("loom")


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)  # grads exist: zero_ fills them
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One profiled training step (linear + relu + loss + backward + SGD),
    its inputs copied in and its loss copied out, plus a matmul on a side
    stream; with its chrome trace parsed."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = torch.randn(16, 32), torch.randint(0, 8, (16,))
    _step(model, opt, xs.to("loom"), ys.to("loom"))  # the grads now exist
    a, b = torch.randn(24, 40, device="loom"), torch.randn(40, 56, device="loom")
    side = torch.loom.Stream()
    torch.loom.synchronize()
    # Every op runs natively (none falls back to the CPU): all work is loom's.
    mode = torch.loom.get_fallback_mode()
    torch.loom.set_fallback_mode("error")
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            x, y = xs.to("loom"), ys.to("loom")
            loss = _step(model, opt, x, y).item()
            with record_function("side_stream_work"), torch.loom.stream(side):
                c = torch.mm(a, b)
            torch.loom.synchronize()
    finally:
        torch.loom.set_fallback_mode(mode)
    path = tmp_path_factory.mktemp("profile") / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    return {"prof": prof, "trace": trace["traceEvents"], "loss": loss, "c": c,
            "side": side}


def _device_events(trace):
    return [e for e in trace if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]


def test_plugin_is_in_kineto_and_device_activity_supported(profiled):
    assert ProfilerActivity.PrivateUse1 in torch._C._autograd._supported_activities()
    # Kineto took the factory when it started, for the first profile.
    assert torch_loom._C._profiler_plugin_state() == (True, True)


def test_every_device_event_links_to_the_aten_op_that_enqueued_it(profiled):
    events = profiled["prof"].events()
    # Operators (their own correlation ids); device events and loom's
    # enqueue events number themselves apart and link to an operator.
    ops = {e.id: e for e in events
           if e.device_type == DeviceType.CPU and e.linked_correlation_id == 0}
    device = [e for e in events if e.device_type == DeviceType.PrivateUse1]
    names = {e.name for e in device}
    assert {"gemm.compute", "fill.strided", "memcpy HtoD", "memcpy DtoH"} <= names, names
    for e in device:
        op = ops.get(e.linked_correlation_id)
        assert op is not None, f"{e.name} is linked to no operator"
        assert op.name.startswith("aten::"), f"{e.name} is linked to {op.name}"
        # Enqueued by that operator, so it ran after the operator began.
        assert e.time_range.start >= op.time_range.start, (e.name, op.name)
        # Its time is the operator's device time.
        assert any(k.name == e.name for k in op.kernels), (e.name, op.name)
    # The forward's addmm, the backward's mm and the step's kernels all
    # carry device time (the backward's on autograd's own thread).
    by_op = {}
    for e in device:
        by_op.setdefault(ops[e.linked_correlation_id].name, []).append(e.name)
    assert "aten::addmm" in by_op and "aten::mm" in by_op, by_op.keys()
    averages = {a.key: a for a in profiled["prof"].key_averages()}
    for op in ("aten::addmm", "aten::mm", "aten::zero_"):
        assert averages[op].self_device_time_total > 0, op
    table = profiled["prof"].key_averages().table(sort_by="self_device_time_total")
    assert "Self LOOM" in table and "gemm.compute" in table


def test_chrome_trace_rows_flows_and_correlation(profiled):
    trace = profiled["trace"]
    cpu_ops = {e["args"]["External id"]: e for e in trace
               if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    device = _device_events(trace)
    assert device
    device_index = torch.loom.current_device()
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for e in device:
        assert e["pid"] == device_index
        assert rows.get((e["pid"], e["tid"]), "").startswith("loom stream"), e
        op = cpu_ops[e["args"]["External id"]]  # the aten op that enqueued it
        assert op["name"].startswith("aten::")
        assert e["ts"] >= op["ts"], (e["name"], op["name"])
    # Each command's flow starts at its enqueue, inside the operator on the
    # CPU thread, and ends at its execution on the stream's row.
    starts = {e["id"]: e for e in trace if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in trace if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    for e in device:
        flow = e["args"]["correlation"]
        assert flow in starts and flow in ends, e
        assert (ends[flow]["pid"], ends[flow]["tid"]) == (e["pid"], e["tid"])
        op = cpu_ops[e["args"]["External id"]]
        assert starts[flow]["tid"] == op["tid"]
        assert op["ts"] <= starts[flow]["ts"] <= e["ts"]


def test_side_stream_work_is_on_its_own_row(profiled):
    trace = profiled["trace"]
    region = next(e for e in trace if e.get("name") == "side_stream_work" and e.get("ph") == "X"
                  and e.get("cat") == "user_annotation")
    inside = {e["args"]["External id"] for e in trace
              if e.get("cat") == "cpu_op" and region["ts"] <= e["ts"] <= region["ts"] + region["dur"]}
    device = _device_events(trace)
    side = [e for e in device if e["args"]["External id"] in inside]
    main = [e for e in device if e["args"]["External id"] not in inside]
    assert side and main
    side_rows = {e["tid"] for e in side}
    main_rows = {e["tid"] for e in main}
    assert len(side_rows) == 1 and len(main_rows) == 1 and side_rows != main_rows
    assert all(e["name"].startswith(("gemm", "gemv")) for e in side)


def test_copies_and_fills_carry_bytes(profiled):
    device = _device_events(profiled["trace"])
    copies = [(e["name"], e["args"]["bytes"]) for e in device if e["cat"] == "gpu_memcpy"]
    assert ("memcpy HtoD", 16 * 32 * 4) in copies  # x
    assert ("memcpy HtoD", 16 * 8) in copies  # y (int64)
    assert ("memcpy DtoH", 4) in copies  # loss.item()
    assert all(e["name"] == "fill.strided" for e in device if e["cat"] == "gpu_memset")
    # zero_grad fills each parameter's gradient
    zero_ops = {e["args"]["External id"] for e in profiled["trace"]
                if e.get("cat") == "cpu_op" and e["name"] == "aten::zero_"}
    fills = sorted(e["args"]["bytes"] for e in device
                   if e["cat"] == "gpu_memset" and e["args"]["External id"] in zero_ops)
    assert fills == sorted([64 * 32 * 4, 64 * 4, 8 * 64 * 4, 8 * 4]), fills


def test_gemm_kernels_carry_flops(profiled):
    device = _device_events(profiled["trace"])
    products = [e for e in device if e["name"] in ("gemm.compute", "gemv.compute")]
    assert products and all(e["args"].get("flops", 0) > 0 for e in products)
    flops = {e["args"]["flops"] for e in products}
    assert 2 * 16 * 64 * 32 in flops  # the first linear's forward
    assert 2 * 24 * 56 * 40 in flops  # the side stream's mm
    # Kernels that only move data count none.
    assert all("flops" not in e["args"] for e in device if e["cat"] != "kernel")


def test_nothing_is_recorded_when_the_profiler_is_off(profiled):
    assert not torch_loom._C._trace_enabled()
    torch_loom._C._trace_drain()  # whatever the session left
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _step(model, opt, torch.randn(4, 32).to("loom"), torch.randint(0, 8, (4,)).to("loom"))
    torch.loom.synchronize()
    assert torch_loom._C._trace_drain() == []


def test_profile_without_device_activities_records_nothing():
    a = torch.randn(8, 8, device="loom")
    torch_loom._C._trace_drain()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (a @ a).sum().item()
        assert not torch_loom._C._trace_enabled()
    assert torch_loom._C._trace_drain() == []
    assert not [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def test_legacy_profiler_times_ops_with_loom_events():
    a, b = torch.randn(64, 64, device="loom"), torch.randn(64, 64, device="loom")
    torch.loom.synchronize()
    with torch.autograd.profiler.profile(use_device="loom") as prof:
        c = torch.mm(a, b)
        torch.loom.synchronize()
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > 0
    torch.testing.assert_close(c.cpu(), a.cpu() @ b.cpu())


@pytest.mark.parametrize("dtype,channels_last", [(torch.float32, False), (torch.bfloat16, True)])
def test_convolution_kernels_carry_their_flops(tmp_path, dtype, channels_last):
    # Whichever path the planner picks (direct, padded rows, Winograd,
    # channels-last, im2col + GEMM), the forward's launches count the
    # direct form's 2 * outputs * (C * kh * kw), and so do the weight
    # gradient's.
    n, c, o, h, w, k = 2, 8, 16, 12, 12, 3
    x = torch.randn(n, c, h, w).to("loom", dtype)
    conv = torch.nn.Conv2d(c, o, k, padding=1, bias=False).to("loom", dtype)
    if channels_last:
        x, conv = x.to(memory_format=torch.channels_last), conv.to(memory_format=torch.channels_last)
    conv(x).sum().backward()  # warm: plans and workspaces
    torch.loom.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with record_function("conv_forward"):
            y = conv(x)
            torch.loom.synchronize()
        with record_function("conv_backward"):
            y.backward(torch.ones_like(y))
            torch.loom.synchronize()
    prof.export_chrome_trace(str(tmp_path / "conv.json"))
    with open(tmp_path / "conv.json") as f:
        trace = json.load(f)["traceEvents"]
    nominal = 2 * n * o * h * w * c * k * k
    for region in ("conv_forward", "conv_backward"):
        r = next(e for e in trace if e.get("name") == region and e.get("ph") == "X"
                 and e.get("cat") == "user_annotation")
        ops = {e["args"]["External id"] for e in trace if e.get("cat") == "cpu_op"
               and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]}
        flops = sum(e["args"].get("flops", 0) for e in _device_events(trace)
                    if e["args"]["External id"] in ops)
        assert flops == nominal, (region, flops, nominal)


def test_a_full_ring_drops_counts_and_warns():
    # 64 records per stream, 200 launches (two records each): the profile
    # keeps what fit, in order, and warns with the count of the rest.
    proc = run_python("""
        import torch, torch_loom
        from torch.autograd import DeviceType
        from torch.profiler import profile, ProfilerActivity
        a = torch.ones(4, device="loom")
        torch.loom.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            for _ in range(200):
                a.add_(1)
            torch.loom.synchronize()
        kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
        print(len(kernels), a[0].item())
    """, env={"LOOM_PROFILER_RECORDS": "64"})
    count, value = proc.stdout.split()
    # 64 records: 32 launches and their enqueues
    assert int(count) == 32 and float(value) == 201.0
    # PyTorch prints the warning of its profiler's processing on stderr.
    assert "loom profiler: 336 device trace records were dropped" in proc.stderr, proc.stderr
