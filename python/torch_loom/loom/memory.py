"""Memory of the loom caching allocator as ``torch.cuda.memory`` offers it:
statistics with the keys of ``torch.cuda.memory_stats``, the summary table,
and the memory history and snapshots that PyTorch's memory viewer
(pytorch.org/memory_viz, ``torch.cuda._memory_viz``) reads."""

import atexit
import collections
import pickle
import sys
from inspect import signature

import torch

from .. import _C
from ._utils import _get_device_index


def _index(device) -> int:
    from . import _lazy_init

    _lazy_init()
    return _get_device_index(device, optional=True)


def memory_stats(device=None) -> "collections.OrderedDict[str, int]":
    """Flat allocator statistics, e.g. ``"allocated_bytes.all.current"``."""
    stats = torch._C._accelerator_getDeviceStats(_index(device))
    flat = []

    def flatten(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                flatten(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, value))

    flatten("", stats)
    flat.sort()
    return collections.OrderedDict(flat)


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None) -> None:
    torch._C._accelerator_resetPeakStats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch._C._accelerator_resetAccumulatedStats(_index(device))


def empty_cache() -> None:
    """Returns every cached, unused block of every loom device."""
    from . import _lazy_init

    _lazy_init()
    torch._C._accelerator_emptyCache()


def get_memory_info(device=None) -> tuple:
    """(free, total) bytes of the device under its memory limit."""
    return tuple(torch._C._accelerator_getMemoryInfo(_index(device)))


mem_get_info = get_memory_info


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """The table ``torch.cuda.memory_summary`` prints, for a loom device."""
    device = _index(device)
    stats = memory_stats(device)

    def _format_size(sz, pref_sz):
        prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_sz < 768 * 1024:
                break
            prefix = new_prefix
            sz //= 1024
            pref_sz /= 1024
        return f"{sz:6d} {prefix}"

    def _format_count(cnt, pref_cnt):
        prefixes = [" ", "K", "M"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_cnt < 750 * 1000:
                break
            prefix = new_prefix
            cnt //= 1000
            pref_cnt /= 1000
        return f"{cnt:7d} {prefix} "

    def _label(name):
        # The name column is 21 wide after a space; a 22-character name
        # takes the space, so the borders stay where torch.cuda puts them.
        return f" {name:<21}" if len(name) <= 21 else f"{name:<22}"

    def _row(name, formatter, values, pref):
        cells = " | ".join(formatter(v, p) for v, p in zip(values, pref))
        return f"{_label(name)} | {cells} "

    metrics_to_display = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "loom reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "loom reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    fields = ("current", "peak", "allocated", "freed")

    lines = []
    lines.append("=" * 75)
    lines.append(f" {'':16} PyTorch loom memory summary, device ID {device:<17d} ")
    lines.append("-" * 75)
    lines.append(
        f"  {'':9} loom OOMs: {stats['num_ooms']:<12d} | {'':5} "
        f"loom_malloc retries: {stats['num_alloc_retries']:<8d}  "
    )
    lines.append("=" * 75)
    lines.append("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")
    for metric_key, metric_name, formatter in metrics_to_display:
        lines.append("-" * 75)
        submetrics = [("all", metric_name)]
        if not abbreviated:
            submetrics.append(("large_pool", "      from large pool"))
            submetrics.append(("small_pool", "      from small pool"))
        pref = None
        for submetric_key, submetric_name in submetrics:
            values = [stats[f"{metric_key}.{submetric_key}.{f}"] for f in fields]
            pref = pref or values
            lines.append(_row(submetric_name, formatter, values, pref))
    for metric_key, metric_name in (
        ("oversize_allocations", "Oversize allocations"),
        ("oversize_segments", "Oversize loom segments"),
    ):
        lines.append("-" * 75)
        values = [stats[f"{metric_key}.{f}"] for f in fields]
        lines.append(_row(metric_name, _format_count, values, values))
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


# ---- memory history and snapshots ---------------------------------------------

_history_atexit = False


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """Records stack traces of loom allocations and, with ``enabled="all"``,
    a history of the allocator's events, as
    :func:`torch.cuda.memory._record_memory_history` does for CUDA:
    :func:`_snapshot` returns them and the tools of
    ``torch.cuda._memory_viz`` (or pytorch.org/memory_viz) draw them.

    Args:
        enabled: ``None`` stops recording and drops what was recorded;
            ``"state"`` keeps the stacks of the memory allocated now;
            ``"all"`` also keeps the history of allocator events.
        context: which events get stacks: ``None``, ``"state"`` (live
            memory), ``"alloc"`` (also allocations), ``"all"`` (also frees).
        stacks: ``"python"`` (Python and TorchScript frames) or ``"all"``
            (C++ frames too).
        max_entries: the history keeps the newest ``max_entries`` events
            per device.
        clear_history: drop the history recorded so far.
        skip_actions: event kinds not to record (``"alloc"``,
            ``"free_requested"``, ``"free_completed"``, ``"segment_alloc"``,
            ``"segment_free"``, ``"oom"``, ``"snapshot"``).
        device, compile_context, global_record_annotations: as for CUDA;
            the history covers every device, and loom records no compile
            context or annotations (True raises ``NotImplementedError``).

    A bool ``enabled`` takes the older form of the call, as in torch.cuda.
    """
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(
    enabled="all",
    context="all",
    stacks="all",
    max_entries: int = sys.maxsize,
    device=None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions=None,
):
    global _history_atexit
    for name, value in (("compile_context", compile_context),
                        ("global_record_annotations", global_record_annotations)):
        if value:
            raise NotImplementedError(f"torch.loom.memory._record_memory_history: {name} is not supported")
    if not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"torch.loom.memory._record_memory_history: max_entries must be a "
                         f"non-negative int, got {max_entries!r}")
    from . import _lazy_init

    _lazy_init()
    _C._record_memory_history(enabled, context, stacks, max_entries, clear_history,
                              list(skip_actions or []))
    if enabled is not None and not _history_atexit:
        # Tensors freed while the interpreter shuts down must not gather
        # Python stacks.
        atexit.register(_C._record_memory_history, None, None, "python", 0, True, [])
        _history_atexit = True


def _record_memory_history_legacy(
    enabled: bool,
    record_context=True,
    trace_alloc_max_entries=1,
    trace_alloc_record_context=False,
    device=None,
    record_context_cpp=False,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
):
    if not enabled:
        return _record_memory_history_impl(None)
    return _record_memory_history_impl(
        "all" if trace_alloc_max_entries > 1 else "state",
        ("alloc" if trace_alloc_record_context else "state") if record_context else None,
        "all" if record_context_cpp else "python",
        max(trace_alloc_max_entries, 0),
        device,
        clear_history,
        compile_context,
        global_record_annotations,
        skip_actions,
    )


_record_memory_history.__signature__ = signature(_record_memory_history_impl)


def _snapshot(device=None, augment_with_fx_traces=False) -> dict:
    """The state of the loom allocator now, as ``torch.cuda.memory._snapshot``
    gives CUDA's: ``{"segments": [...], "device_traces": [...],
    "allocator_settings": {...}}``. Segments (memory obtained from the
    device at once) list their blocks with sizes, the size requested, state
    (``"active_allocated"``, ``"active_pending_free"``, ``"inactive"``) and
    the stack frames of their allocation; ``device_traces`` holds each
    device's history of events (empty unless recording ``"all"``). Streams
    are ``torch.loom.Stream.stream_id`` values (0: the default stream).
    Covers every device, as for CUDA."""
    from . import _lazy_init

    _lazy_init()
    s = _C._memory_snapshot()
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces

        s = _augment_memory_snapshot_stack_traces(s)
    return s


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False) -> None:
    """Pickles :func:`_snapshot` to ``filename``, the file pytorch.org/memory_viz
    opens."""
    s = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def memory_snapshot(mempool_id=None, include_traces=True) -> list:
    """The segments of every loom device's allocator (``_snapshot()["segments"]``)."""
    if mempool_id is not None:
        raise ValueError("torch.loom.memory_snapshot: loom has no memory pools; mempool_id must be None")
    return _snapshot()["segments"]
