"""What the Python wrappers Inductor generates for loom graphs call at run
time. Kept apart from the code generators so that loading a compiled graph
imports nothing of Inductor's codegen."""

from __future__ import annotations

import ctypes

from .. import _C


#: empty_strided(size, stride, device="loom", dtype=dtype) on the current
#: loom device, for the buffers of generated wrappers (backend.py).
empty_strided_loom = _C._empty_strided_loom


def _address(lib, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def loom_cpp_kernel(async_compile, key: str, kinds: str, nests: str, source: str):
    """A generated kernel group (cpp_kernels.py) as a callable that launches
    its loop nests on the current stream: compiles `source` with Inductor's
    C++ code cache (in its compile workers when it has them) and registers
    nest i's entry point as the kernel "inductor.<key>.<i>". `nests` has a
    letter per nest: "p" split across loom's workers, "s" one chunk."""
    from torch._inductor.async_compile import get_compile_threads
    from torch._inductor.codecache import CppCodeCache, LambdaFuture

    def build(lib):
        entries = [(f"inductor.{key}.{i}", _address(lib, f"loom_entry_{i}"),
                    _address(lib, f"loom_range_{i}"), mode == "s") for i, mode in enumerate(nests)]
        return _C._InductorKernel(kinds, entries)

    if get_compile_threads() <= 1:
        return build(CppCodeCache.load(source))
    load = CppCodeCache.load_async(source, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: build(load()))
