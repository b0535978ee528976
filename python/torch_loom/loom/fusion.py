"""Adaptive eager: loom streams fuse the elementwise launches queued on them.

When a stream's executor takes an elementwise kernel launch, it looks at the
launches already queued after it; those over the same number of elements
that share memory with it only element for element join a group, whose
chunks run one after another for every member (one fork-join, intermediates
kept in the cache). Results are bitwise those of unfused execution.

Level 2: a group of float pointwise launches whose signature the executors
saw three times is compiled (loom's compiler IR and C emitter,
torch_loom.compiler.regions) by a daemon thread started with fusion on,
into one loop that computes every member per element, rounding each value
to its tensor's dtype; it then runs as that loop (``compiled_regions``), and
intermediates (values a later member reads) no tensor holds any more
(overwritten by a later member, or freed by Python before the group ran)
are not stored (``bytes_not_written``); a value no member reads is always
stored. Without
a C compiler (one warning) or with ``LOOM_FUSE_REGIONS=0`` groups stay at
level 1. :func:`wait_regions` waits for compiles in flight.

GEMM epilogues (``LOOM_FUSE_EPILOGUE=1``): the elementwise launches queued
right after a matrix product that read its result run on each output tile
as the product finishes it; the product and the intermediates Python freed
before the group ran, and no step reads from memory, are not stored either
(``bytes_not_written``; the product is then computed into the last step's
output).

The mode starts from ``LOOM_FUSE`` (``0``, ``1`` the default, or ``verify``:
each group also runs unfused from the same inputs and any difference in the
bytes is an error of the stream) and is changed for the process with
:func:`set_mode` or, for a block, :func:`mode`.
"""

import atexit
import contextlib
import os
import threading
import time

from .. import _C

_MODES = {"0": 0, "off": 0, "1": 1, "on": 1, "verify": 2}
_NAMES = {0: "0", 1: "1", 2: "verify"}


def _mode_value(mode) -> int:
    if isinstance(mode, bool):
        return int(mode)
    key = str(mode).lower()
    if key not in _MODES:
        raise ValueError(
            f"torch.loom.fusion: mode must be one of 0, 1, 'verify' (or False/True), got {mode!r}"
        )
    return _MODES[key]


def get_mode() -> str:
    """``"0"``, ``"1"`` or ``"verify"``."""
    return _NAMES[_C._fuse_get_mode()]


def set_mode(mode) -> None:
    """Sets the mode for the whole process: 0/False, 1/True or ``"verify"``.
    Groups formed from then on follow it."""
    value = _mode_value(mode)
    _C._fuse_set_mode(value)
    if value:
        _start_regions()


@contextlib.contextmanager
def mode(value):
    """Runs a block under another mode, restoring the previous one after.
    The mode is the process's, not the thread's."""
    before = _C._fuse_get_mode()
    set_mode(value)
    try:
        yield
    finally:
        _C._fuse_set_mode(before)


def counters() -> dict:
    """Counts since the process started or :func:`reset_counters`:
    ``groups`` (of two or more launches), ``ops_fused`` (launches in them),
    ``reordered`` (launches run ahead of independent ones they followed),
    ``bytes_cached`` (bytes written for a later member of the same chunk),
    ``compiled_regions`` (groups run as one compiled loop: level 2),
    ``bytes_not_written`` (bytes of member values those loops, or GEMM
    epilogues, did not store: overwritten by a later member, or freed by
    Python before the group ran), ``verified`` and ``verify_skipped`` (groups ``verify`` compared,
    or could not)."""
    return dict(_C._fuse_stats())


def reset_counters() -> None:
    _C._fuse_stats_reset()


# ---- level 2: compiled regions ------------------------------------------------------
#
# A signature of float pointwise launches the executors saw repeatedly is
# compiled by a daemon thread (torch_loom.compiler.regions), which waits for
# the runtime's requests without the GIL; LOOM_FUSE_REGIONS=0 leaves every
# group at level 1.

_regions_thread = None
_regions_lock = threading.Lock()


def _serve_regions():
    from ..compiler import regions

    regions.serve()


def _start_regions() -> None:
    global _regions_thread
    if os.environ.get("LOOM_FUSE_REGIONS", "1") == "0":
        return
    with _regions_lock:
        if _regions_thread is not None:
            return
        _regions_thread = threading.Thread(target=_serve_regions, name="loom-fuse-regions",
                                           daemon=True)
        _regions_thread.start()
        atexit.register(_stop_regions)


def _stop_regions() -> None:
    _C._fuse_region_set_ops(None)
    _C._fuse_region_stop()
    t = _regions_thread
    if t is not None:
        t.join(timeout=5)


def regions_pending() -> int:
    """Compile requests for compiled regions not installed yet."""
    return int(_C._fuse_region_pending())


def wait_regions(timeout: float = 60.0) -> bool:
    """Waits until no compiled region is being compiled; whether that
    happened within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while _C._fuse_region_pending() > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def elementwise_kernels() -> list:
    """Names of the kernels that declare themselves elementwise (the ones
    groups are made of)."""
    return list(_C._fuse_elementwise_kernels())


__all__ = ["counters", "elementwise_kernels", "get_mode", "mode", "regions_pending",
           "reset_counters", "set_mode", "wait_regions"]

if _C._fuse_get_mode():
    _start_regions()
