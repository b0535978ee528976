"""Dynamo's device interface for loom.

PyTorch 2.13 registers none for an out-of-tree device, yet Dynamo reads it
to trace streams and events, and Inductor to size kernels: every reduction
lowering reads ``get_device_properties(device).multi_processor_count`` and
``get_compute_capability()``, and before forking its compile workers
Inductor calls ``Worker.get_device_properties()`` on every registered,
available interface. Nothing here may raise there: a device that cannot
answer (the runtime failed to start, a forked child) gets properties that
describe the host's cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
)

import torch_loom.loom as _loom


@dataclass(frozen=True)
class LoomWorkerProperties:
    """What Inductor reads of a device, with every field it may read."""

    name: str
    index: int
    multi_processor_count: int
    total_memory: int
    major: int
    minor: int
    # GPU notions Inductor reads with defaults; loom has no warps or blocks,
    # so these describe one host thread.
    warp_size: int = 1
    max_threads_per_block: int = 1
    max_threads_per_multi_processor: int = 1
    regs_per_multiprocessor: int = 0
    host_addressable: bool = True


def _describe(index: int) -> LoomWorkerProperties:
    try:
        p = _loom._C._device_properties(index)
        return LoomWorkerProperties(
            name=p["name"], index=index, multi_processor_count=max(1, int(p["num_threads"])),
            total_memory=int(p["total_memory"]), major=int(p["major"]), minor=int(p["minor"]),
            host_addressable=bool(p.get("host_addressable", False)))
    except Exception:  # the runtime cannot answer: describe the host
        return LoomWorkerProperties(name="loom (unavailable)", index=index,
                                    multi_processor_count=os.cpu_count() or 1,
                                    total_memory=0, major=0, minor=0, host_addressable=False)


def _index(device) -> int:
    if device is None:
        return LoomInterface.Worker.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "loom":
            raise ValueError(f"loom device interface: expected a loom device, got {device}")
        return device.index if device.index is not None else LoomInterface.Worker.current_device()
    return int(device)


class LoomInterface(DeviceInterface):
    device = _loom.device
    Event = _loom.Event
    Stream = _loom.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["loom"] = device

        @staticmethod
        def current_device() -> int:
            if "loom" in caching_worker_current_devices:
                return caching_worker_current_devices["loom"]
            try:
                return _loom._C._get_device()
            except Exception:
                return 0

        @staticmethod
        def get_device_properties(device=None) -> LoomWorkerProperties:
            try:
                index = _index(device)
            except (TypeError, ValueError):
                index = 0
            cached = caching_worker_device_properties.get("loom")
            if cached is None:
                try:
                    count = max(1, _loom._C._device_count())
                except Exception:
                    count = 1
                cached = [_describe(i) for i in range(count)]
                caching_worker_device_properties["loom"] = cached
            return cached[index] if 0 <= index < len(cached) else _describe(index)

    current_device = staticmethod(_loom.current_device)
    set_device = staticmethod(_loom.set_device)
    device_count = staticmethod(_loom.device_count)
    stream = staticmethod(_loom.stream)
    current_stream = staticmethod(_loom.current_stream)
    set_stream = staticmethod(_loom.set_stream)
    synchronize = staticmethod(_loom.synchronize)
    memory_allocated = staticmethod(_loom.memory_allocated)
    is_bf16_supported = staticmethod(_loom.is_bf16_supported)

    @staticmethod
    def is_available() -> bool:
        try:
            return _loom.is_available()
        except Exception:
            return False

    @staticmethod
    def exchange_device(device: int) -> int:
        _loom._lazy_init()
        return _loom._C._exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        if device < 0:
            return -1
        return LoomInterface.exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _loom.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                      device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return _loom.current_stream(device_idx).stream_id

    @classmethod
    def get_device_properties(cls, device=None) -> LoomWorkerProperties:
        return cls.Worker.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device=None) -> str:
        # Inductor puts it in cache keys; loom's kernels are host code, so the
        # driver and its version identify what they run on.
        p = LoomInterface.Worker.get_device_properties(device)
        return f"loom{p.major}.{p.minor}"

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


def register(with_indices: bool = False) -> None:
    """Registers the interface for "loom"; with `with_indices`, also for
    "loom:0", "loom:1", ... (that asks the runtime for its device count, so
    it waits for a compile, which starts the runtime anyway)."""
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device("loom", LoomInterface)
    run_stream_code_eagerly()
    if with_indices:
        try:
            count = _loom._C._device_count()
        except Exception:
            count = 0
        for i in range(count):
            register_interface_for_device(f"loom:{i}", LoomInterface)


def run_stream_code_eagerly() -> None:
    """Dynamo runs torch.loom's stream and event code as Python, never
    compiling it: it would break the graph inside ``StreamContext.__enter__``
    and compile the rest of it with the stream it saw while tracing, leaving
    the caller of a compiled ``with torch.loom.stream(s):`` on ``s``. The
    user's function breaks its graph at the ``with`` instead and runs the
    context manager as eager code does. Called when the interface registers
    and again when Inductor loads: Dynamo's trace rules may still be
    importing at the first call (they import the device interfaces)."""
    global _stream_code_skipped
    import sys

    add = getattr(sys.modules.get("torch._dynamo.trace_rules"), "add", None)
    if add is None or _stream_code_skipped:
        return
    add("torch_loom.loom.streams")
    _stream_code_skipped = True


_stream_code_skipped = False
