"""torch_loom.tile: loom kernels written in Triton's language.

    import torch_loom.tile as tl

    @tl.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    add_kernel[(tl.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

A kernel's source is traced (never run) to a tile IR, emitted as C with
the kernel library's math, compiled by loom's JIT and launched on the
current loom stream. The module also stands in for ``triton`` and
``triton.language`` (``tl.language is tl``), so Triton kernels run after
changing their imports. :func:`kernel_op` makes a launch one node under
torch.compile and differentiable. See README.md for the supported subset.
"""

import builtins as _builtins
import sys as _sys

from .core import (bf16, bfloat16, cdiv, constexpr, dtype, float16, float32, float64, fp16, fp32,
                   fp64, int1, int8, int16, int32, int64, next_power_of_2, uint8)
from .interpreter import (abs, arange, argmax, argmin, assume, broadcast_to, cast, ceil, cos,
                          debug_barrier, device_assert, device_print, dot, erf, exp, exp2,
                          expand_dims, floor, fma, full, load, log, log2, max, max_constancy,
                          max_contiguous, maximum, min, minimum, multiple_of, num_programs,
                          permute, program_id, range, reshape, rsqrt, sigmoid, sin, sqrt, sqrt_rn,
                          static_assert, static_print, static_range, store, sum, trans, view, where,
                          zeros, zeros_like)
from .jit import Config, JITFunction, autotune, heuristics, interpreting, jit
from .op import kernel_op
from .trace import TileCompileError

# ``cdiv`` works on blocks inside kernels too (the interpreter's blocks
# support the arithmetic; the compiler reads the call).
language = _sys.modules[__name__]
# ``import torch_loom.tile.language as tl`` as for ``triton.language``
_sys.modules[__name__ + ".language"] = language
tensor = None  # annotations only

del _builtins


class _Driver:
    """``triton.runtime.driver.active`` as far as Triton's tutorials use it."""

    @staticmethod
    def get_active_torch_device():
        import torch
        return torch.device("loom", torch.accelerator.current_device_index())


class runtime:  # noqa: N801 - Triton's module name
    class driver:  # noqa: N801
        active = _Driver()
