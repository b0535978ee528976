"""The work list: every OpInfo in PyTorch's op_db crossed with the dtypes we test.

The OpInfo is the only source of truth about an op: its samples, the dtypes the
CPU supports, its tolerances (toleranceOverride decorators) and its verdict on
whether a device-vs-CPU comparison is meaningful at all (the decorators it puts
on TestCommon.test_compare_cpu, e.g. "output is non-deterministic").
"""

import functools
import unittest
import warnings

import torch

# The dtypes of the sweep, in report column order.
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@functools.lru_cache(maxsize=1)
def op_db():
    """{OpInfo.full_name: OpInfo} for every entry of op_db, in op_db order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as db
    return {op.full_name: op for op in db}


def cpu_dtypes(op):
    """The sweep dtypes the CPU supports for `op`, in column order."""
    supported = op.supported_dtypes("cpu")
    return [name for name, dt in DTYPES.items() if dt in supported]


def work_items(ops=None, dtypes=None):
    """([(op_name, dtype_name)], {op_name: reason not run}).

    `ops` and `dtypes` restrict the sweep; an op of `ops` that has none of the
    requested dtypes is returned among the not-run ops with the reason.
    """
    db = op_db()
    names = list(db) if ops is None else list(ops)
    items, not_run = [], {}
    for name in names:
        op = db.get(name)
        if op is None:
            not_run[name] = "no OpInfo of this name in op_db"
            continue
        have = cpu_dtypes(op)
        if not have:
            not_run[name] = "the CPU supports none of the swept dtypes (%s)" % ", ".join(
                sorted(str(d).replace("torch.", "") for d in op.supported_dtypes("cpu"))
                or ["none"]
            )
            continue
        chosen = [d for d in have if dtypes is None or d in dtypes]
        if not chosen:
            not_run[name] = "none of the requested dtypes is supported on the CPU"
            continue
        items.extend((name, d) for d in chosen)
    return items, not_run


def _infos(op):
    """The OpInfo's DecorateInfo entries (plain decorators apply to every test
    and say nothing about comparisons)."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    return [d for d in op.decorators if isinstance(d, DecorateInfo)]


def _decorators(op, dtype, device_type, test_name):
    """Decorator objects the OpInfo applies to TestCommon.<test_name> for this dtype."""
    out = []
    for info in _infos(op):
        if info.is_active("TestCommon", test_name, device_type, dtype, {}):
            out.extend(info.decorators)
    return out


def compare_cpu_verdict(op, dtype, device_type):
    """(kind, reason) the OpInfo declares for comparing against the CPU.

    kind is None (compare values), "skip" (values are not comparable: compare
    shapes and dtypes only) or "xfail" (the OpInfo expects device and CPU values
    to differ on some device; values are still compared and a mismatch reported).
    """
    for dec in _decorators(op, dtype, device_type, "test_compare_cpu"):
        if dec is unittest.expectedFailure:
            return "xfail", "OpInfo marks test_compare_cpu as an expected failure"
        if getattr(dec, "__qualname__", "").startswith("skip."):
            reason = "skipped by the OpInfo"
            for cell in getattr(dec, "__closure__", None) or ():
                if isinstance(cell.cell_contents, str):
                    reason = cell.cell_contents
            return "skip", reason
    return None, None


# torch.testing.assert_close defaults, which the OpInfo overrides may loosen.
_DEFAULT_TOL = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
}


def tolerances(op, dtype, device_type):
    """(rtol, atol) for this op and dtype: the loosest of assert_close's default
    and every toleranceOverride the OpInfo declares for the dtype on any of its
    tests (those are the tolerances its authors found the op needs)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    rtol, atol = _DEFAULT_TOL.get(dtype, (0.0, 0.0))
    for info in _infos(op):
        if info.device_type not in (None, "cpu", device_type):
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if not info.active_if or callable(info.active_if):
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                rtol, atol = max(rtol, t.rtol), max(atol, t.atol)
    return rtol, atol
