"""``@tl.jit``: a kernel function, specialised per call signature (tensor
dtypes and 16-byte alignment, integer arguments equal to 1, constexpr
values), compiled once per specialisation through loom's JIT (the disk
cache serves later processes) and launched on the current loom stream as
``kernel[grid](*args, BLOCK=...)``. The grid is the launch range, split
into chunks of consecutive programs, so programs spread over the
device's workers.

``LOOM_TILE_INTERPRET=1`` runs kernels in the interpreter instead."""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
import threading

import torch

from .. import _C
from ..compiler import jit as cjit
from . import core, csource, interpreter, rowmap
from . import nodes as N
from .trace import TileCompileError, Tracer

_launch = getattr(_C, "_launch_kernel", None)  # None when the native extension did not load
# The native launch of cached specialisations (csrc/python/tile_launch.cpp):
# `kernel[grid](...)` binds, keys, finds the entry and enqueues in one call,
# and calls JITFunction._launch for the rest (a new specialisation, the
# interpreter, arguments it leaves to Python's binding).
_TileLaunch = getattr(_C, "_TileLaunch", None)
_Tensor = torch.Tensor
_lock = threading.Lock()
_trace_lock = threading.Lock()
_table = None


def _builtins():
    global _table
    if _table is None:
        from . import lower
        import torch_loom.tile as lang
        _table = lower.table(lang)
    return _table


# os.environ's bytes dict, where the platform has one: a look-up there
# costs a twentieth of os.environ.get's for a name that is not set
_environ_bytes = getattr(os.environ, "_data", None)
if not isinstance(_environ_bytes, dict) or not all(type(k) is bytes for k in list(_environ_bytes)[:1]):
    _environ_bytes = None


def interpreting():
    """Whether LOOM_TILE_INTERPRET is set (read at every launch: a test may
    set it for a while)."""
    if _environ_bytes is not None:
        return _environ_bytes.get(b"LOOM_TILE_INTERPRET", b"0") not in (b"", b"0")
    return os.environ.get("LOOM_TILE_INTERPRET", "0") not in ("", "0")


if _TileLaunch is not None:
    _C._tile_setup(core.constexpr, _environ_bytes, interpreting)


class _Entry:
    __slots__ = ("name", "tensors", "scalars", "module", "source", "work", "rows")

    def __init__(self, name, tensors, scalars, module, source, work, rows=None):
        self.name, self.tensors, self.scalars, self.module, self.source = name, tensors, scalars, module, source
        self.work = work
        self.rows = rows  # rowmap.RowMap when the kernel declares a row map, else None


def _is_constexpr_annotation(a):
    if a is core.constexpr or isinstance(a, core.constexpr):
        return True
    return isinstance(a, str) and a.split(".")[-1] == "constexpr"


class JITFunction:
    """A kernel (or a helper called from kernels)."""

    _is_tile_jit = True

    def __init__(self, fn, do_not_specialize=(), **options):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        lines, self.first_line = inspect.getsourcelines(fn)
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        self.tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
        if not isinstance(self.tree, ast.FunctionDef):
            raise TypeError("tl.jit decorates functions")
        self.globals = fn.__globals__
        sig = inspect.signature(fn)
        self.params = list(sig.parameters)
        self.defaults = [p.default for p in sig.parameters.values()]
        self.constexprs = frozenset(k for k, p in enumerate(sig.parameters.values())
                                    if _is_constexpr_annotation(p.annotation))
        self._index = {n: k for k, n in enumerate(self.params)}
        self._const = tuple(k in self.constexprs for k in range(len(self.params)))
        self._cache = {}
        # the native launch's view of the parameters and of _cache's entries
        self._state = None if _TileLaunch is None else _C._tile_state(
            self.__name__, tuple(self.params), self._const, tuple(self.defaults), inspect.Parameter.empty)

    def __repr__(self):
        return f"<torch_loom.tile.jit {self.__name__}>"

    # Inside the interpreter, and for helpers called from kernels there.
    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __getitem__(self, grid):
        if _TileLaunch is not None:
            return _TileLaunch(self, self._state, grid)
        return _Launcher(self, grid)

    def bind(self, args, kwargs):
        if len(args) > len(self.params):
            raise TypeError(f"{self.__name__}: takes {len(self.params)} arguments, got {len(args)}")
        values = list(args) + [inspect.Parameter.empty] * (len(self.params) - len(args))
        for k, v in kwargs.items():
            i = self._index.get(k)
            if i is None:
                continue  # launch options (num_warps, num_stages, ...)
            values[i] = v
        for i, v in enumerate(values):
            if v is inspect.Parameter.empty:
                values[i] = self.defaults[i]
                if values[i] is inspect.Parameter.empty:
                    raise TypeError(f"{self.__name__}: missing argument {self.params[i]!r}")
        return values

    def _key(self, values):
        """The specialisation key (the native launch computes the same)."""
        if self._state is not None:
            return _C._tile_key(self._state, values)
        key = []
        add = key.append
        storages = []
        for v, const in zip(values, self._const):
            if const:
                add(v.value if isinstance(v, core.constexpr) else v)
            elif isinstance(v, _Tensor):
                add((v.dtype, v.data_ptr() % 16 == 0))
                storages.append(v.untyped_storage().data_ptr())
            elif type(v) is int:
                add(1 if v == 1 else (0 if -2147483648 <= v < 2147483648 else 2))
            elif type(v) is float:
                add(0.5)
            else:
                add(("c", v))
        # whether no two tensors share memory: loads may then read in place
        add(len(set(storages)) == len(storages))
        return tuple(key)

    def specs(self, values):
        out = []
        for i, v in enumerate(values):
            name = self.params[i]
            if i in self.constexprs:
                out.append(("const", v.value if isinstance(v, core.constexpr) else v))
            elif isinstance(v, torch.Tensor):
                out.append(("tensor", core.from_torch(v.dtype), v.data_ptr() % 16 == 0))
            elif isinstance(v, bool) or v is None or isinstance(v, (str, core.dtype)):
                out.append(("const", v))
            elif isinstance(v, int):
                out.append(("const", 1) if v == 1 else ("int", core.scalar_dtype(v)))
            elif isinstance(v, float):
                out.append(("float", core.float32))
            else:
                raise TypeError(f"{self.__name__}: argument {name!r} is a {type(v).__name__}; kernels "
                                "take tensors, ints, floats, bools, None and constexprs")
        return out

    def _compile(self, key, values):
        specs = self.specs(values)
        with _trace_lock:  # the tracer's scope stack is module state
            tracer, lines, work = _trace(self, specs, lazy=key[-1])
        source = csource.module("LOOM_TILE_KERNEL", lines, tracer.tensor_decls, tracer.scalar_decls)
        tensors = [i for i, s in enumerate(specs) if s[0] == "tensor"]
        scalars = [i for i, s in enumerate(specs) if s[0] in ("int", "float")]
        # a kernel proved row-wise declares its row map, so adaptive eager
        # may group its launches by rows as the library's row kernels
        rows = rowmap.prove(tracer)
        if rows is not None:
            index, n_scalars = rowmap.scalar_indices(specs, self.params)
            c = rowmap.c_function(rows, "LOOM_TILE_KERNEL_rows", index, n_scalars, len(tensors))
            if c is None:
                rows = None
            else:
                source += c
        name = csource.kernel_name(self.__name__, source)
        source = source.replace("LOOM_TILE_KERNEL", name)
        module = _compile_module(source, name, rows is not None)
        entry = _Entry(name, tensors, scalars, module, source, work, rows)
        with _lock:
            self._cache[key] = entry
            if self._state is not None:
                _C._tile_register(self._state, key, name, tensors, scalars, _CHUNK_WORK // work)
        return entry

    def source(self, *args, **kwargs):
        """The C source of the specialisation these arguments select."""
        values = self.bind(args, kwargs)
        key = self._key(values)
        entry = self._cache.get(key) or self._compile(key, values)
        return entry.source

    def run(self, *args, grid, **kwargs):
        return self._launch(grid, args, kwargs)

    def _launch(self, grid, args, kwargs):
        params = self.params
        values = [*args, *kwargs.values()]
        if len(values) != len(params) or (kwargs and list(kwargs) != params[len(args):]):
            values = self.bind(args, kwargs)
        if callable(grid):
            meta = dict(zip(self.params, values))
            meta.update(kwargs)
            grid = grid(meta)
        if isinstance(grid, int):
            grid = (grid,)
        if len(grid) == 1 and grid[0] >= 0:
            g = (int(grid[0]), 1, 1)
        else:
            g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
            if len(g) != 3 or min(g) < 0:
                raise ValueError(f"{self.__name__}: the grid must be 1 to 3 non-negative sizes, got {grid}")
        if interpreting():
            interpreter.run(self.fn, g, self.params, values, self.specs(values))
            return
        if _launch is None:
            raise RuntimeError(f"{self.__name__}: the loom device is unavailable (torch_loom's native "
                               "extension did not load); LOOM_TILE_INTERPRET=1 runs kernels without it")
        key = self._key(values)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._compile(key, values)
        total = g[0] * g[1] * g[2]
        if total:
            # Programs are independent: runs of consecutive programs per
            # chunk (at least 32 chunks, of about _CHUNK_WORK elements
            # stored) keep each worker's memory stream
            # sequential and the workers evenly loaded; the split never
            # depends on the thread count.
            _launch(entry.name, [values[i] for i in entry.tensors],
                    [g[0], g[1], g[2], *[values[i] for i in entry.scalars]], total,
                    max(1, min(total // 32, _CHUNK_WORK // entry.work)))


def _compile_module(source, name, row_map):
    if not row_map:
        return cjit.compile(source, [name], extra_flags=csource.compile_flags())
    if not cjit.available():
        cjit.compile(source, [name])  # raises what compile raises without a compiler
    job = _C._jit_compile_async(source, [(name, name)], False, csource.compile_flags(), cjit.include_dir(),
                                [name + "_rows"])
    return cjit.CompileJob(job, [name]).result()


#: Elements a chunk of programs stores, about (the library's row kernels
#: take chunks of 16K elements).
_CHUNK_WORK = 16384


def _trace(fn, specs, lazy):
    """The tracer, the program's C lines and its work per program (elements
    stored, in loops counted 8 times): traced with loads read in place where
    they may be (lazy: no two tensor arguments share memory), again until
    no load breaks the rules of nodes._Memory (each pass makes more loads
    eager, so this ends)."""
    written, eager = frozenset(), frozenset()
    for _ in range(4):
        tracer = Tracer(fn, specs, _builtins(), lazy, eager, written)
        lines = tracer.run()
        mem = N._mem
        if not lazy or mem.settled():
            return tracer, lines, max(1, mem.work)
        written, eager = written | mem.stored, eager | mem.violations
    tracer = Tracer(fn, specs, _builtins())
    lines = tracer.run()
    return tracer, lines, max(1, N._mem.work)


class _Launcher:
    __slots__ = ("fn", "grid")

    def __init__(self, fn, grid):
        self.fn, self.grid = fn, grid

    def __call__(self, *args, **kwargs):
        return self.fn._launch(self.grid, args, kwargs)


def jit(fn=None, *, do_not_specialize=(), **options):
    """Decorates a kernel: ``@tl.jit`` or ``@tl.jit(...)``."""
    if fn is None:
        return lambda f: JITFunction(f, do_not_specialize=do_not_specialize, **options)
    return JITFunction(fn, do_not_specialize=do_not_specialize, **options)


class Config:
    """A set of constexprs for :func:`autotune` (num_warps and num_stages are
    accepted and have no meaning on loom)."""

    def __init__(self, kwargs, num_warps=None, num_stages=None, num_ctas=None, maxnreg=None,
                 pre_hook=None):
        self.kwargs = dict(kwargs)
        self.pre_hook = pre_hook


class _Tuned:
    def __init__(self, fn, configs, key):
        self.fn = fn
        self.configs = configs
        self.__name__ = getattr(fn, "__name__", "kernel")

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            cfg = self.configs[0]
            merged = dict(cfg.kwargs)
            merged.update(kwargs)
            return self.fn[grid](*args, **merged)
        return launch

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def autotune(configs, key=(), prune_configs_by=None, reset_to_zero=None, restore_value=None,
             warmup=None, rep=None, **options):
    """Triton's autotuner, accepted: the first config is used (loom's
    kernels are specialised at trace time; no timing runs)."""
    if not configs:
        raise ValueError("tl.autotune: no configs")
    return lambda fn: _Tuned(fn, list(configs), key)


class _Heuristics:
    def __init__(self, fn, values):
        self.fn, self.values = fn, values
        self.__name__ = getattr(fn, "__name__", "kernel")

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            base = self.fn.fn if isinstance(self.fn, _Tuned) else self.fn
            target = base.fn if isinstance(base, _Tuned) else base
            meta = dict(zip(target.params, args))
            meta.update(kwargs)
            for k, f in self.values.items():
                kwargs[k] = f(meta)
                meta[k] = kwargs[k]
            return self.fn[grid](*args, **kwargs)
        return launch


def heuristics(values):
    return lambda fn: _Heuristics(fn, values)


__all__ = ["JITFunction", "jit", "Config", "autotune", "heuristics", "TileCompileError", "interpreting"]
