"""Memory statistics of the loom caching allocator, with the keys of
``torch.cuda.memory_stats``."""

import collections

import torch

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


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the main allocator statistics of the device."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Non-releasable memory", "inactive_split_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Reserved segments", "segment", False),
    ]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    line = "-" * 79
    out = [line, f" loom memory summary, device {index}".ljust(79), line]
    out.append(f"{'Metric':<28}{'Cur Usage':>12}{'Peak Usage':>13}{'Tot Alloc':>13}{'Tot Freed':>13}")
    for title, key, is_bytes in rows:
        for pool in pools:
            vals = [stats.get(f"{key}.{pool}.{m}", 0) for m in ("current", "peak", "allocated", "freed")]
            fmt = _format_bytes if is_bytes else str
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            out.append(f"{label:<28}" + "".join(f"{fmt(v):>13}" for v in vals)[1:])
    out.append(line)
    out.append(
        f"num_alloc_retries: {stats.get('num_alloc_retries', 0)}    "
        f"num_ooms: {stats.get('num_ooms', 0)}"
    )
    out.append(line)
    return "\n".join(out) + "\n"
