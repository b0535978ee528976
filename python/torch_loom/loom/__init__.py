"""torch.loom: the device module of the loom accelerator.

It offers what ``torch.cuda`` offers: devices, streams and events, random
number generators, memory statistics, plus :func:`fallback_ops`, the record
of operators that ran on the CPU because loom has no kernel for them.
"""

import atexit
import threading
from dataclasses import dataclass, field

import torch

from .. import _C
from ._utils import _get_device_index

_initialized = False
_init_lock = threading.Lock()

# Lets autograd's loom threads finish with the GIL before the interpreter
# finalizes (see csrc/python/autograd.cpp).
atexit.register(_C._drain_autograd)


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def is_available() -> bool:
    """True when the loom runtime runs and exposes at least one device."""
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def is_initialized() -> bool:
    return _initialized and not _is_in_bad_fork()


def _lazy_init():
    global _initialized
    if is_initialized():
        return
    with _init_lock:
        if is_initialized():
            return
        if _is_in_bad_fork():
            raise RuntimeError(
                "Cannot re-initialize loom in a forked subprocess. Use the "
                "'spawn' start method to use loom with multiprocessing."
            )
        _C._init()
        _initialized = True


def init():
    """Starts the loom runtime (otherwise started on first use)."""
    _lazy_init()


def current_device() -> int:
    _lazy_init()
    return _C._get_device()


def set_device(device) -> None:
    index = _get_device_index(device)
    if index >= 0:
        _lazy_init()
        _C._set_device(index)


class device:
    """Context manager that makes ``device`` the current loom device."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        _lazy_init()
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        self.idx = _C._exchange_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "loom" else -1)


@dataclass(frozen=True)
class _LoomDeviceProperties:
    name: str
    driver: str
    index: int
    total_memory: int
    num_threads: int
    major: int
    minor: int
    features: tuple = field(default_factory=tuple)

    @property
    def multi_processor_count(self) -> int:
        return self.num_threads


def get_device_properties(device=None) -> _LoomDeviceProperties:
    _lazy_init()
    p = _C._device_properties(_get_device_index(device, optional=True))
    return _LoomDeviceProperties(
        name=p["name"],
        driver=p["driver"],
        index=p["index"],
        total_memory=p["total_memory"],
        num_threads=p["num_threads"],
        major=p["major"],
        minor=p["minor"],
        features=tuple(p["features"]),
    )


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    p = get_device_properties(device)
    return (p.major, p.minor)


def synchronize(device=None) -> None:
    """Waits for all work on every stream of the device; raises the first
    asynchronous error of that work."""
    _lazy_init()
    _C._synchronize(_get_device_index(device, optional=True))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def fallback_ops() -> dict:
    """Operators that ran on the CPU through the fallback, with counts."""
    return dict(_C._fallback_ops())


def clear_fallback_ops() -> None:
    _C._clear_fallback_ops()


def get_fallback_mode() -> str:
    return _C._get_fallback_mode()


def set_fallback_mode(mode: str) -> None:
    """``"warn"`` (one warning per operator), ``"silent"`` or ``"error"``."""
    _C._set_fallback_mode(mode)


def __getattr__(name):
    # Inductor reads its backend for loom from here (Scheduling,
    # PythonWrapperCodegen, ...); serving it loads torch_loom._inductor.
    from .._inductor import BACKEND_NAMES, inductor_attr

    if name in BACKEND_NAMES:
        return inductor_attr(name)
    raise AttributeError(f"module 'torch.loom' has no attribute '{name}'")


from . import amp  # noqa: E402
from . import fusion  # noqa: E402
from .amp import get_amp_supported_dtype  # noqa: E402
from .fusion import counters as fusion_counters  # noqa: E402
from .graphs import (  # noqa: E402
    Graph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from .memory import (  # noqa: E402
    empty_cache,
    get_memory_info,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (  # noqa: E402
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event",
    "Graph",
    "Stream",
    "StreamContext",
    "amp",
    "clear_fallback_ops",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "fallback_ops",
    "fusion",
    "fusion_counters",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_fallback_mode",
    "get_memory_info",
    "get_rng_state",
    "get_rng_state_all",
    "graph",
    "graph_pool_handle",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "manual_seed",
    "make_graphed_callables",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_fallback_mode",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
