"""The loom allocator's memory history, snapshots and profiler reports, as
torch.cuda.memory offers them for CUDA: _record_memory_history, _snapshot,
_dump_snapshot read by torch.cuda._memory_viz, memory_summary's table, and
torch.profiler's profile_memory."""

import json
import pickle
import sys
import threading

import pytest
import torch
import torch.cuda._memory_viz as viz
from torch.profiler import ProfilerActivity

from torch_loom import _C

MiB = 1 << 20


def _line():
    """The caller's line number."""
    return sys._getframe(1).f_lineno


@pytest.fixture
def history(loom):
    """Records everything with Python stacks for the test; off afterwards."""
    loom.synchronize()
    loom.empty_cache()
    loom.memory._record_memory_history("all", context="all", stacks="python")
    yield loom.memory
    loom.memory._record_memory_history(None)


def _blocks(snapshot):
    """address -> (segment, block) of every block."""
    return {b["address"]: (seg, b) for seg in snapshot["segments"] for b in seg["blocks"]}


def _block_containing(snapshot, addr):
    """(segment, block) of the block holding `addr` (a freed block may have
    merged with a free neighbour)."""
    for seg in snapshot["segments"]:
        for b in seg["blocks"]:
            if b["address"] <= addr < b["address"] + b["size"]:
                return seg, b
    raise KeyError(addr)


def _trace(snapshot, device=0):
    return snapshot["device_traces"][device]


def _events_at(snapshot, addr):
    """The block events at `addr`, in order."""
    return [e["action"] for e in _trace(snapshot)
            if e.get("addr") == addr and e["action"] in ("alloc", "free_requested", "free_completed")]


def _names(frames, function):
    """(line, name) of the frames in this file's `function`."""
    return [(f["line"], f["name"]) for f in frames
            if f["filename"] == __file__ and f["name"] == function]


def test_snapshot_lists_allocations_of_two_streams(history, loom):
    side = loom.Stream()
    a = torch.empty(1000, dtype=torch.uint8, device="loom"); line_a = _line()  # noqa: E702
    with loom.stream(side):
        b = torch.empty(3 * MiB + 1, dtype=torch.uint8, device="loom"); line_b = _line()  # noqa: E702
    snap = history._snapshot()
    assert set(snap) == {"segments", "device_traces", "allocator_settings"}
    assert len(snap["device_traces"]) == loom.device_count()
    blocks = _blocks(snap)

    seg_a, blk_a = blocks[a.data_ptr()]
    assert (blk_a["size"], blk_a["requested_size"], blk_a["state"]) == (1024, 1000, "active_allocated")
    assert (seg_a["stream"], seg_a["segment_type"], seg_a["total_size"]) == (0, "small", 2 * MiB)
    seg_b, blk_b = blocks[b.data_ptr()]
    assert (blk_b["size"], blk_b["requested_size"]) == (3 * MiB + 512, 3 * MiB + 1)
    assert blk_b["state"] == "active_allocated"
    assert (seg_b["stream"], seg_b["segment_type"], seg_b["total_size"]) == (side.stream_id, "large", 20 * MiB)
    assert side.stream_id != 0
    for seg in (seg_a, seg_b):
        assert seg["device"] == 0 and seg["is_expandable"] is False
        assert seg["segment_pool_id"] == (0, 0)
        assert seg["allocated_size"] == sum(x["size"] for x in seg["blocks"] if x["state"] == "active_allocated")
        assert seg["total_size"] == sum(x["size"] for x in seg["blocks"])
        assert seg["requested_size"] >= blocks[a.data_ptr() if seg is seg_a else b.data_ptr()][1]["requested_size"]

    # Where each was allocated: this function, at its line.
    name = "test_snapshot_lists_allocations_of_two_streams"
    assert (line_a, name) in _names(blk_a["frames"], name)
    assert (line_b, name) in _names(blk_b["frames"], name)
    # The large segment was obtained for b, so it carries b's stack.
    assert (line_b, name) in _names(seg_b["frames"], name)

    trace = _trace(snap)
    allocs = {e["addr"]: e for e in trace if e["action"] == "alloc"}
    assert (allocs[a.data_ptr()]["size"], allocs[a.data_ptr()]["stream"]) == (1000, 0)
    assert (allocs[b.data_ptr()]["size"], allocs[b.data_ptr()]["stream"]) == (3 * MiB + 1, side.stream_id)
    assert (line_b, name) in _names(allocs[b.data_ptr()]["frames"], name)
    seg_allocs = [i for i, e in enumerate(trace)
                  if e["action"] == "segment_alloc" and e["addr"] == seg_b["address"]]
    assert len(seg_allocs) == 1 and trace[seg_allocs[0]]["size"] == 20 * MiB
    assert seg_allocs[0] < trace.index(allocs[b.data_ptr()])
    assert all(isinstance(e["time_us"], int) and e["time_us"] > 0 for e in trace)
    assert trace[-1]["action"] == "snapshot"


def test_free_request_and_completion(history, loom):
    a = torch.empty(4096, dtype=torch.uint8, device="loom")
    addr = a.data_ptr()
    del a; line = _line()  # noqa: E702
    snap = history._snapshot()
    seg, blk = _block_containing(snap, addr)
    assert blk["state"] == "inactive" and blk["frames"] == []
    assert _events_at(snap, addr) == ["alloc", "free_requested", "free_completed"]
    freed = [e for e in _trace(snap) if e.get("addr") == addr and e["action"].startswith("free")]
    assert [e["size"] for e in freed] == [4096, 4096]
    name = "test_free_request_and_completion"
    assert (line, name) in _names(freed[0]["frames"], name)


def test_record_stream_defers_completion(history, loom):
    """A block another stream still uses is freed when requested and
    completes when that stream is done."""
    side = loom.Stream()
    a = torch.empty(8192, dtype=torch.uint8, device="loom")
    addr = a.data_ptr()
    _C._hold_stream(side)
    try:
        a.record_stream(side)
        del a
        snap = history._snapshot()
        seg, blk = _blocks(snap)[addr]
        assert blk["state"] == "active_pending_free"
        assert (blk["size"], blk["requested_size"]) == (8192, 8192)
        assert seg["active_size"] >= 8192 and seg["allocated_size"] == seg["active_size"] - 8192
        assert _events_at(snap, addr) == ["alloc", "free_requested"]
        name = "test_record_stream_defers_completion"
        assert _names(blk["frames"], name), "a pending block keeps its allocation's stack"
    finally:
        _C._release_held_streams()
    side.synchronize()
    snap = history._snapshot()
    assert _block_containing(snap, addr)[1]["state"] == "inactive"
    assert _events_at(snap, addr) == ["alloc", "free_requested", "free_completed"]


def test_empty_cache_and_out_of_memory_are_recorded(history, loom):
    x = torch.empty(30 * MiB, dtype=torch.uint8, device="loom")
    seg_addr = _blocks(history._snapshot())[x.data_ptr()][0]["address"]
    del x
    loom.empty_cache(); line = _line()  # noqa: E702
    trace = _trace(history._snapshot())
    frees = [e for e in trace if e["action"] == "segment_free" and e["addr"] == seg_addr]
    assert len(frees) == 1 and frees[0]["size"] == 30 * MiB
    name = "test_empty_cache_and_out_of_memory_are_recorded"
    assert (line, name) in _names(frees[0]["frames"], name)
    too_much = loom.get_device_properties().total_memory + MiB
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(too_much, dtype=torch.uint8, device="loom")
    ooms = [e for e in _trace(history._snapshot()) if e["action"] == "oom"]
    assert ooms and ooms[-1]["size"] == too_much and "addr" not in ooms[-1]
    assert 0 <= ooms[-1]["device_free"] <= loom.get_device_properties().total_memory


def test_dump_snapshot_renders_in_memory_viz(history, loom, tmp_path):
    side = loom.Stream()
    keep = [torch.empty(n, dtype=torch.uint8, device="loom") for n in (700, 5000, 2 * MiB)]
    with loom.stream(side):
        keep.append(torch.empty(64 * 1024, dtype=torch.uint8, device="loom")); line = _line()  # noqa: E702
    del keep[1]
    path = tmp_path / "loom_snapshot.pickle"
    history._dump_snapshot(str(path))
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert {"segments", "device_traces"} <= set(data)

    stats = viz.segsum(data)  # checks that blocks tile their segments
    assert f"segments: {len(data['segments'])}" in stats
    text = viz.trace(data)
    assert "Device 0" in text and "del " in text and "free completed" in text
    flame = viz.segments(data, format_flamegraph=lambda lines: lines)
    assert f"stream_{side.stream_id};seg_" in flame
    assert f"test_memory_snapshot.py:{line}:test_dump_snapshot_renders_in_memory_viz" in flame
    usage = viz.memory(data, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in usage and "inactive" in usage
    for html in (viz.trace_plot(data), viz.trace_plot(data, plot_segments=True), viz.segment_plot(data)):
        assert "snapshot.pickle" in html and "MemoryViz.js" in html


def test_recording_off_stops_and_clears(loom):
    loom.memory._record_memory_history("all", stacks="python")
    x = torch.empty(4096, dtype=torch.uint8, device="loom")
    assert _C._memory_history_enabled()
    loom.memory._record_memory_history(None)
    assert not _C._memory_history_enabled()
    y = torch.empty(4096, dtype=torch.uint8, device="loom")
    snap = loom.memory._snapshot()
    assert all(trace == [] for trace in snap["device_traces"])
    blocks = _blocks(snap)
    assert blocks[x.data_ptr()][1]["frames"] == [] and blocks[y.data_ptr()][1]["frames"] == []
    del x, y


def test_max_entries_keeps_the_newest(loom):
    loom.memory._record_memory_history("all", stacks="python", max_entries=5)
    try:
        addrs = []
        for n in range(1, 11):
            t = torch.empty(n * 1024, dtype=torch.uint8, device="loom")
            addrs.append(t.data_ptr())
            del t
        trace = _trace(loom.memory._snapshot())
        assert len(trace) == 5
        # Newest last: ... the last tensor's alloc, free request and
        # completion, then the snapshot itself.
        assert [e["action"] for e in trace[-4:]] == ["alloc", "free_requested", "free_completed", "snapshot"]
        assert trace[-4]["size"] == 10 * 1024
        # Lowering the bound keeps the newest.
        loom.memory._record_memory_history("all", stacks="python", max_entries=2)
        trace = _trace(loom.memory._snapshot())
        assert [e["action"] for e in trace] == ["snapshot", "snapshot"]
    finally:
        loom.memory._record_memory_history(None)


def test_state_only_and_context_levels(loom):
    name = "test_state_only_and_context_levels"
    try:
        # "state": stacks of live memory, no history.
        loom.memory._record_memory_history("state", stacks="python")
        x = torch.empty(2048, dtype=torch.uint8, device="loom"); line = _line()  # noqa: E702
        snap = loom.memory._snapshot()
        assert _trace(snap) == []
        assert (line, name) in _names(_blocks(snap)[x.data_ptr()][1]["frames"], name)
        del x
        # "alloc": allocations carry stacks, frees do not.
        loom.memory._record_memory_history("all", context="alloc", stacks="python", clear_history=True)
        y = torch.empty(2048, dtype=torch.uint8, device="loom")
        addr = y.data_ptr()
        del y
        entries = {e["action"]: e for e in _trace(loom.memory._snapshot()) if e.get("addr") == addr}
        assert _names(entries["alloc"]["frames"], name)
        assert entries["free_requested"]["frames"] == [] and entries["free_completed"]["frames"] == []
        # No context: no stacks anywhere; skip_actions leaves kinds out.
        loom.memory._record_memory_history("all", context=None, stacks="python", clear_history=True,
                                           skip_actions=["free_requested"])
        z = torch.empty(2048, dtype=torch.uint8, device="loom")
        addr = z.data_ptr()
        snap = loom.memory._snapshot()
        assert _blocks(snap)[addr][1]["frames"] == []
        del z
        assert _events_at(loom.memory._snapshot(), addr) == ["alloc", "free_completed"]
    finally:
        loom.memory._record_memory_history(None)


def test_cpp_stacks(loom):
    loom.memory._record_memory_history("state", stacks="all")
    try:
        x = torch.empty(1024, dtype=torch.uint8, device="loom")
        frames = _blocks(loom.memory._snapshot())[x.data_ptr()][1]["frames"]
        name = "test_cpp_stacks"
        assert _names(frames, name)
        # Beyond Python's: frames of the native code that allocated.
        assert any(not f["filename"].endswith(".py") for f in frames)
    finally:
        loom.memory._record_memory_history(None)


def test_legacy_form_and_bad_arguments(loom):
    mem = loom.memory
    try:
        mem._record_memory_history(True, trace_alloc_max_entries=3)
        x = torch.empty(1024, dtype=torch.uint8, device="loom")
        del x
        assert [e["action"] for e in _trace(mem._snapshot())] == ["free_requested", "free_completed", "snapshot"]
    finally:
        mem._record_memory_history(False)
    assert not _C._memory_history_enabled()
    for kwargs, error in [
        (dict(enabled="everything"), ValueError),
        (dict(context="some"), ValueError),
        (dict(stacks="cpp"), ValueError),
        (dict(skip_actions=["allocate"]), ValueError),
        (dict(max_entries=-1), ValueError),
        (dict(compile_context=True), NotImplementedError),
    ]:
        with pytest.raises(error, match="_record_memory_history"):
            mem._record_memory_history(**kwargs)
        assert not _C._memory_history_enabled()
    with pytest.raises(ValueError, match="memory_snapshot"):
        loom.memory_snapshot(mempool_id=(1, 2))


def test_memory_snapshot_is_the_segments(history, loom):
    x = torch.empty(4096, dtype=torch.uint8, device="loom")
    segments = loom.memory_snapshot()
    assert x.data_ptr() in {b["address"] for seg in segments for b in seg["blocks"]}
    assert loom.memory_snapshot is loom.memory.memory_snapshot
    assert callable(torch.loom.memory._record_memory_history)


def test_memory_summary_is_cudas_table(loom, monkeypatch):
    """memory_summary prints torch.cuda.memory_summary's table, run here on
    loom's statistics: the same lines, borders and numbers; "loom" where it
    says CUDA or GPU."""
    keep = [torch.empty(n, dtype=torch.uint8, device="loom") for n in (3000, 5 * MiB)]
    for abbreviated in (False, True):
        stats = loom.memory_stats()
        ours = loom.memory_summary(abbreviated=abbreviated)
        monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: stats)
        cuda = torch.cuda.memory_summary(loom.current_device(), abbreviated=abbreviated)
        ours_lines, cuda_lines = ours.splitlines(), cuda.splitlines()
        assert len(ours_lines) == len(cuda_lines)
        for mine, theirs in zip(ours_lines, cuda_lines):
            assert len(mine) == len(theirs), (mine, theirs)
            assert [i for i, c in enumerate(mine) if c == "|"] == [i for i, c in enumerate(theirs) if c == "|"]
            renamed = (theirs.replace("CUDA OOMs", "loom OOMs").replace("CUDA", "loom")
                       .replace("GPU", "loom").replace("cudaMalloc", "loom_malloc"))
            assert mine.replace("|", " | ").split() == renamed.replace("|", " | ").split(), (mine, theirs)
    assert "loom reserved memory" in ours and "PyTorch loom memory summary" in ours
    del keep


def _profile_allocation(activities, tmp_path):
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        x = torch.empty(MiB, dtype=torch.uint8, device="loom")
        del x
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return prof, events


def _check_profile(prof, events):
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["aten::empty"].self_device_memory_usage == MiB
    assert rows["aten::empty"].device_memory_usage == MiB
    assert rows["aten::empty"].self_cpu_memory_usage == 0
    memory = [e for e in events if e.get("name") == "[memory]"]
    loom_events = [e["args"] for e in memory
                   if e["args"].get("Device Type") == int(torch._C._autograd.DeviceType.PrivateUse1)]
    sizes = [a["Bytes"] for a in loom_events]
    assert sizes == [MiB, -MiB], sizes
    assert all(a["Device Id"] == 0 and a["Total Reserved"] >= a["Total Allocated"] >= 0
               for a in loom_events)


def test_profiler_reports_loom_memory(loom, tmp_path):
    prof, events = _profile_allocation([ProfilerActivity.CPU], tmp_path)
    _check_profile(prof, events)


def test_profiler_with_the_loom_activity_reports_loom_memory(loom, tmp_path):
    prof, events = _profile_allocation([ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], tmp_path)
    _check_profile(prof, events)


def test_history_from_other_threads_and_backward(history, loom):
    """Frees and allocations on autograd's device thread and on other
    Python threads are recorded; every block's events pair up."""
    w = torch.randn(64, 64, device="loom", requires_grad=True)
    (w @ w).relu().sum().backward()

    def churn():
        for n in range(1, 50):
            t = torch.empty(n * 256, dtype=torch.uint8, device="loom")
            del t

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loom.synchronize()
    grad = w.grad
    snap = history._snapshot()
    viz.segsum(snap)
    trace = _trace(snap)
    count = {a: sum(e["action"] == a for e in trace) for a in ("alloc", "free_requested", "free_completed")}
    assert count["alloc"] >= 3 * 49 + 4
    assert count["free_requested"] == count["free_completed"]
    live = {b["address"] for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"}
    assert grad.data_ptr() in live and w.data_ptr() in live
    # Every alloc recorded since the fixture started either was freed or is live.
    freed = {e["addr"] for e in trace if e["action"] == "free_requested"}
    for e in trace:
        if e["action"] == "alloc":
            assert e["addr"] in freed or e["addr"] in live


def test_exit_while_recording(py):
    """Tensors still alive when the interpreter exits are freed without
    gathering stacks from a finalizing interpreter."""
    out = py(
        """
        import torch, torch_loom
        torch.loom.memory._record_memory_history("all", stacks="all")
        keep = [torch.empty(n * 1000, device="loom") for n in range(1, 20)]
        w = torch.randn(32, 32, device="loom", requires_grad=True)
        (w * w).sum().backward()
        del keep[::2]
        print("ok", torch_loom._C._memory_history_enabled())
        """
    )
    assert out.stdout.strip() == "ok True"


def test_two_devices_have_their_own_traces(py):
    out = py(
        """
        import torch
        torch.loom.memory._record_memory_history("all", context=None)
        with torch.loom.device(1):
            side = torch.loom.Stream()
        x = torch.empty(3000, dtype=torch.uint8, device="loom:0")
        with torch.loom.stream(side):
            y = torch.empty(5000, dtype=torch.uint8, device="loom:1")
        snap = torch.loom.memory._snapshot()
        assert len(snap["device_traces"]) == 2
        segs = {(s["device"], b["address"]): s for s in snap["segments"] for b in s["blocks"]}
        assert segs[(0, x.data_ptr())]["stream"] == 0
        assert segs[(1, y.data_ptr())]["stream"] == side.stream_id
        allocs = [[(e["addr"], e["size"]) for e in t if e["action"] == "alloc"] for t in snap["device_traces"]]
        assert allocs == [[(x.data_ptr(), 3000)], [(y.data_ptr(), 5000)]], allocs
        print("ok")
        """,
        env={"LOOM_NUM_DEVICES": "2"},
    )
    assert out.stdout.strip() == "ok"
