"""The JIT: C source -> the system C compiler -> kernels in loom's registry.

Source is written against ``loom/kernel_abi.h`` (shipped with the package,
see :func:`include_dir`); each listed function becomes a kernel that
:func:`launch` (or any launch by name) runs on loom tensors, on the current
stream, like a library kernel. Compiles run on a thread of the runtime,
never on the Python thread, and land in an on-disk cache
(``LOOM_CACHE_DIR``, default ``~/.cache/torch_loom/jit``): a process that
finds its kernels there runs no compiler. The C side is
``include/loom/jit.h``; ``runtime/README.md`` describes the cache.

Without a C compiler (``LOOM_CC``, else ``cc``), :func:`available` is False
and :func:`compile` raises :class:`CompilerUnavailable`: callers fall back
to library kernels. Either warns once per process.
"""

import threading
import warnings
from pathlib import Path

from .. import _C

__all__ = ["CompileError", "CompilerUnavailable", "Module", "CompileJob", "available",
           "cache_dir", "compile", "compile_async", "include_dir", "launch", "stats"]

#: Elements per chunk of a launch when the caller gives none: a constant, so
#: chunk boundaries (and results) never depend on the number of threads.
DEFAULT_GRAIN = 16384


class CompileError(RuntimeError):
    """The compiler rejected the source, a kernel symbol is missing, or a
    kernel name is taken; the message carries the compiler's output."""


class CompilerUnavailable(CompileError):
    """No C compiler on this machine: use library kernels instead."""


_lock = threading.Lock()
_warned = set()
# Modules by (key, names): a kernel name is registered for as long as its
# module lives here (the registry is process-wide, so the module must not
# vanish with the caller's reference); Module.unload() drops it.
_live = {}


def _warn_once(topic, message):
    with _lock:
        if topic in _warned:
            return
        _warned.add(topic)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def include_dir():
    """The directory holding ``loom/kernel_abi.h``: the package's own copy in
    an installed wheel, else the source tree's ``include/``."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "include", here.parent.parent / "include"):
        if (candidate / "loom" / "kernel_abi.h").is_file():
            return str(candidate)
    raise CompileError("torch_loom.compiler.jit: loom's C headers (loom/kernel_abi.h) are missing "
                       f"from {here / 'include'}; reinstall torch_loom")


def available():
    """Whether a C compiler is there. When not, warns once (callers then
    use library kernels)."""
    ok, message = _C._jit_compiler_available()
    if not ok:
        _warn_once("compiler", f"torch_loom: {message}; kernels that would be compiled run as "
                   "library kernels instead")
    return ok


def cache_dir():
    """The cache directory in use. One that is refused (owned by another
    user, open to others, a link) is reported here with a warning, once;
    compiles then keep their objects in a private directory for the
    process only."""
    ok, path, message = _C._jit_cache_dir()
    if not ok:
        _warn_once("cache", f"torch_loom: {message}; compiled kernels are not cached")
    return path


def stats():
    """This process's JIT counters: compiler_invocations (compiles and
    --version queries), cache_hits, cache_misses, modules_loaded,
    entries_rejected (corrupt or foreign cache entries deleted),
    cache_refusals, compile_failures, compile_seconds."""
    return _C._jit_stats()


class Module:
    """Compiled kernels, registered under their names while the module is
    loaded (until :meth:`unload`)."""

    def __init__(self, handle, names):
        self._handle = handle
        self.kernels = tuple(names)
        self.key = handle.key
        #: "compiled", "cached" (from disk) or "resident" (already in this process).
        self.origin = handle.origin
        #: False when the cache directory was refused: nothing was kept.
        self.persisted = handle.persisted

    def unload(self):
        """Withdraws the kernels' names from the registry. Launches already
        queued still run; the code stays mapped until the process ends."""
        with _lock:
            if _live.get((self.key, self.kernels)) is self:
                del _live[(self.key, self.kernels)]
        self._handle = None

    def __repr__(self):
        return f"<torch_loom.compiler.jit.Module {self.key[:12]} kernels={list(self.kernels)} {self.origin}>"


class CompileJob:
    """A compile running on its own thread."""

    def __init__(self, job, names):
        self._job = job
        self._names = names

    def done(self):
        return self._job.done()

    def result(self):
        """Waits (without the GIL) and returns the :class:`Module`; raises
        :class:`CompileError` when the compile failed."""
        try:
            handle = self._job.wait()
        except RuntimeError as error:
            raise CompileError(str(error)) from None
        module = Module(handle, self._names)
        with _lock:
            module = _live.setdefault((module.key, module.kernels), module)
        if not module.persisted:
            cache_dir()  # says why, once
        return module


def _kernel_pairs(kernels):
    if isinstance(kernels, str):
        kernels = [kernels]
    if isinstance(kernels, dict):
        kernels = list(kernels.items())
    pairs = []
    for k in kernels:
        pair = (k, k) if isinstance(k, str) else tuple(k) if isinstance(k, (tuple, list)) else ()
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise TypeError("torch_loom.compiler.jit.compile: kernels are symbol names or "
                            f"(symbol, registry name) pairs, got {k!r}")
        pairs.append(pair)
    if not pairs:
        raise ValueError("torch_loom.compiler.jit.compile: no kernels listed")
    return pairs


def compile_async(source, kernels, *, fp_contract=False, extra_flags=()):
    """Starts compiling ``source``; returns a :class:`CompileJob`. See
    :func:`compile`."""
    if not isinstance(source, str):
        raise TypeError(f"torch_loom.compiler.jit.compile: source must be a str, got {type(source).__name__}")
    pairs = _kernel_pairs(kernels)
    if not available():
        ok, message = _C._jit_compiler_available()
        raise CompilerUnavailable(f"torch_loom.compiler.jit.compile: {message}")
    flags = [str(f) for f in extra_flags]
    job = _C._jit_compile_async(source, pairs, bool(fp_contract), flags, include_dir())
    return CompileJob(job, [name for _, name in pairs])


def compile(source, kernels, *, fp_contract=False, extra_flags=()):
    """Compiles C ``source`` and registers its kernels.

    ``kernels``: function names (each registered under its own name), or
    ``(symbol, registry_name)`` pairs, or a dict symbol -> registry name.
    Each is a ``loom_kernel_fn`` of ``loom/kernel_abi.h`` with external
    linkage. ``fp_contract=True`` lets the compiler fuse multiply-adds
    (results then differ from the library's); ``extra_flags`` are more
    compiler options. Compiling the same source under the same names again
    returns the same :class:`Module`.
    """
    return compile_async(source, kernels, fp_contract=fp_contract,
                         extra_flags=extra_flags).result()


def launch(name, tensors, scalars=(), *, range=None, grain=DEFAULT_GRAIN):
    """Enqueues the kernel ``name`` on the current stream of the tensors'
    device: it is called on chunks of ``[0, range)`` (default: the first
    tensor's numel) with the tensors' descriptors and ``scalars`` (int or
    bool -> ``.i``, float -> ``.f``). Asynchronous, like any loom op."""
    tensors = list(tensors)
    if range is None:
        if not tensors:
            raise ValueError(f"torch_loom.compiler.jit.launch: {name}: give range= when no tensor is passed")
        range = tensors[0].numel()
    _C._launch_kernel(name, tensors, list(scalars), int(range), int(grain))
