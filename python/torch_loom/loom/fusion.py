"""Adaptive eager: loom streams fuse the elementwise launches queued on them.

When a stream's executor takes an elementwise kernel launch, it looks at the
launches already queued after it; those over the same number of elements
that share memory with it only element for element join a group, whose
chunks run one after another for every member (one fork-join, intermediates
kept in the cache). Results are bitwise those of unfused execution.

The mode starts from ``LOOM_FUSE`` (``0``, ``1`` the default, or ``verify``:
each group also runs unfused from the same inputs and any difference in the
bytes is an error of the stream) and is changed for the process with
:func:`set_mode` or, for a block, :func:`mode`.
"""

import contextlib

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
    _C._fuse_set_mode(_mode_value(mode))


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
    ``bytes_not_written`` and ``compiled_regions`` (compiled regions; 0
    until they exist), ``verified`` and ``verify_skipped`` (groups
    ``verify`` compared, or could not)."""
    return dict(_C._fuse_stats())


def reset_counters() -> None:
    _C._fuse_stats_reset()


def elementwise_kernels() -> list:
    """Names of the kernels that declare themselves elementwise (the ones
    groups are made of)."""
    return list(_C._fuse_elementwise_kernels())


__all__ = ["counters", "elementwise_kernels", "get_mode", "mode", "reset_counters", "set_mode"]
