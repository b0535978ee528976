"""A compiled graph as one program: the fused kernels in one C module (one
compiler run, compiled on a thread of the runtime while Python goes on),
and the units in order as generated Python: allocate a kernel's outputs
with loom's allocator, launch it on the current stream, call a library op,
drop intermediates after their last use. Nothing synchronizes with the
device: everything is enqueued on the stream, as eager does. All decisions
are made at compile time; a call runs straight-line code.
"""

from __future__ import annotations

import threading
import time

import torch

from .. import _C
from . import jit, observe
from .bindings import binding
from .fuse import Kernel
from .ir import Constant, Library, Value
from .loops import build_kernel


def _canon(v):
    """An in-place update's value is its input's tensor."""
    return v.alias if isinstance(v, Value) and v.alias is not None else v


class _Names:
    def __init__(self):
        self.names = {}
        self.globals = {}

    def value(self, v: Value) -> str:
        v = _canon(v)
        if v not in self.names:
            self.names[v] = f"v{len(self.names)}"
        return self.names[v]

    def const(self, obj) -> str:
        if obj is None or isinstance(obj, (bool, int, str)):
            return repr(obj)
        for name, g in self.globals.items():
            if g is obj:
                return name
        name = f"c{len(self.globals)}"
        self.globals[name] = obj
        return name

    def arg(self, a) -> str:
        if isinstance(a, Value):
            return self.value(a)
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(self.arg(x) + ", " for x in a) + ")"
        return self.const(a)


class Program:
    """Callable with AOTAutograd's boxed convention (one list of inputs,
    cleared); returns the graph's outputs as a list."""

    _boxed_call = True

    def __init__(self, graph, fuser, gm, tag, dialect, log, name=None):
        self.gm = gm
        self.tag = tag
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.calls = 0
        self.kernels = []
        self.library_calls = 0
        self.library_names = []
        self.epilogues = []  # per fused product, the ops of its epilogue
        self.batch_norms = []  # per fused batch norm, its kind (batchnorm.py)
        self.library_singles = getattr(fuser, "singles", 0)  # kernels run as their ATen call
        order = fuser.schedule()
        names = _Names()
        units = []
        for u in order:
            if isinstance(u, Kernel):
                provisional = f"loom_kernel_{len(self.kernels)}"  # renamed after the content
                kernel, values, scalars = build_kernel(fuser, u, provisional)
                self.kernels.append(kernel)
                units.append(("kernel", kernel, values, scalars))
            else:
                units.append(("library", u.node, None, None))
                self.library_calls += 1
                self.library_names.append(str(u.node.target))
                if getattr(u.node, "epilogue", None):
                    self.epilogues.append(tuple(u.node.epilogue))
                if getattr(u.node, "fused_relu", None):
                    self.batch_norms.append(u.node.fused_relu)
        self.launches = len(self.kernels)
        self.py_source = self._python(graph, units, names)
        self._globals = names.globals
        self.source = dialect.module(self.kernels) if self.kernels else ""
        self.flags = dialect.compile_flags() if self.kernels else []
        if name is not None and self.kernels:
            name(self)
        self.fallback = None
        self._job = None
        self._module = None
        self._lock = threading.Lock()
        code = compile(self.py_source, f"<loom program {tag}>", "exec")
        env = dict(self._globals)
        # (launches call the runtime's binding itself: jit.launch's checks and
        # conversions are settled when the code is generated)
        env.update(launch=_C._launch_kernel, empty_strided=torch.empty_strided, prog=self,
                   stats=observe.totals)
        exec(code, env)
        self._run = env["run"]
        self._call = self._first_call if self.kernels else self._run
        log.fusion(self)
        log.code(self)

    def start(self):
        """Starts compiling the C module (on a runtime thread)."""
        if self.kernels:
            names = [k.name for k in self.kernels]
            self._job = jit.compile_async(self.source, [(n, n) for n in names], extra_flags=self.flags)

    def wait(self):
        with self._lock:
            if self._module is None and self.kernels:
                start = time.perf_counter()
                try:
                    self._module = self._job.result()
                finally:
                    observe.add_seconds(time.perf_counter() - start)
                observe.record_module(self, self._module)
                self._call = self._run

    def _first_call(self, args):
        try:
            self.wait()
        except jit.CompileError as error:
            if self.fallback is None:
                raise
            import warnings

            warnings.warn(f"torch_loom: backend='loom' could not compile {self.tag}'s kernels "
                          f"({error}); it runs on library kernels", RuntimeWarning, stacklevel=2)
            observe.record_fallback()
            self._call = self.fallback
        return self._call(args)

    def __call__(self, args):
        return self._call(args)

    # ---- the Python of a call --------------------------------------------------------

    def _python(self, graph, units, names):
        outputs = [_canon(v) for v in graph.outputs if isinstance(v, Value)]
        last_use = {}
        for i, (kind, obj, values, scalars) in enumerate(units):
            reads = values + scalars if kind == "kernel" else obj.inputs
            for v in reads:
                last_use[_canon(v)] = i
        keep = set(outputs) | {v for v in graph.inputs if isinstance(v, Value) and any(
            w.alias is v for w in _written(graph))}
        for n in graph.nodes:  # the graph's own tensors: globals, never dropped
            if isinstance(n, Constant):
                keep.add(n.out)
                names.names[n.out] = names.const(n.tensor)
        lines = ["def run(args):"]
        inputs = [names.value(v) if isinstance(v, Value) else "_" for v in graph.inputs]
        if inputs:
            lines.append(f"    {', '.join(inputs)}, = args")
        lines.append("    args.clear()")
        lines.append("    prog.calls += 1")
        lines.append("    stats.calls += 1")
        if self.launches:
            lines.append(f"    stats.launches += {self.launches}")
        if self.library_calls:
            lines.append(f"    stats.library_calls += {self.library_calls}")
        if self.epilogues:
            lines.append(f"    stats.epilogues += {len(self.epilogues)}")
        for v in graph.inputs:
            if isinstance(v, Value) and v not in last_use and v not in keep:
                lines.append(f"    del {names.value(v)}")
        for i, (kind, obj, values, scalars) in enumerate(units):
            if kind == "kernel":
                for a, v in zip(obj.args, values):
                    if a.output and v.alias is None:
                        lines.append(f"    {names.value(v)} = empty_strided({tuple(v.shape)!r}, "
                                     f"{tuple(v.stride)!r}, dtype={names.const(v.dtype)}, "
                                     f"device={names.const(v.device)})")
                tensors = ", ".join(names.value(v) for v in values)
                rng, grain = _launch_range(obj, values)
                sargs = "".join(f"{names.value(v)}.item(), " for v in scalars)
                lines.append(f"    launch({obj.name!r}, [{tensors}], [{sargs}], range={rng}, "
                             f"grain={grain})")
                produced = [v for a, v in zip(obj.args, values) if a.output and v.alias is None]
            else:
                call = self._library_call(obj, names)
                if obj.multi:
                    lines.append(f"    _r = {call}")
                    for j, v in enumerate(obj.slots):
                        if v is not None:
                            lines.append(f"    {names.value(v)} = _r[{j}]")
                    lines.append("    del _r")
                else:
                    target = names.value(obj.out) if obj.outputs else "_"
                    lines.append(f"    {target} = {call}")
                produced = list(obj.outputs)
            dead = [_canon(v) for v in (values + scalars if kind == "kernel" else obj.inputs)]
            dead = [v for v in dead if last_use.get(v) == i and v not in keep]
            dead += [v for v in produced if v not in last_use and v not in keep]
            dead = list(dict.fromkeys(names.value(v) for v in dead))
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        outs = [(names.value(v) + (".clone()" if isinstance(v.producer, Constant) else ""))
                if isinstance(v, Value) else names.const(v) for v in graph.outputs]
        lines.append(f"    return [{', '.join(outs)}]")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _library_call(node: Library, names):
        # An OpOverload's call is its binding's (bindings.py) or its builtin's.
        target = names.const(binding(node.target, node.kwargs))
        parts = [names.arg(a) for a in node.args]
        parts += [f"{k}={names.arg(v)}" for k, v in node.kwargs.items()]
        return f"{target}({', '.join(parts)})"


def _written(graph):
    return [v for n in graph.nodes for v in n.outputs if v.alias is not None]


def _launch_range(k, values=()):
    """(range, grain) of a kernel's launch: elements for a pointwise kernel
    (jit.DEFAULT_GRAIN per chunk), outer indices for a reduction kernel
    (about as many elements per chunk). A reduction that runs in its
    column form (a reduced operand not contiguous along the reduced dim:
    emit_c_loops.block_helper) reads each row's part of its chunk along
    memory, so its chunks take at least COLUMN_CHUNK outputs when there
    are enough of them. Fixed by the shapes and strides alone."""
    if k.is_pointwise:
        n = 1
        for s in k.dims:
            n *= s
        return n, jit.DEFAULT_GRAIN
    grain = max(1, jit.DEFAULT_GRAIN // max(1, k.inner_numel))
    if _column_form(k, values):
        grain = max(grain, min(COLUMN_CHUNK, k.outer_numel // 8))
    return k.outer_numel, grain


#: Outputs per chunk a column-form reduction aims at (a 512-byte run of
#: each float32 row).
COLUMN_CHUNK = 128


def _column_form(k, values) -> bool:
    """Whether reduction kernel k runs in its column form for these
    argument values (the kernel's C makes the same choice from the
    strides)."""
    if len(k.dims) - k.n_outer != 1 or k.n_outer < 1 or len(k.passes) != 1 or k.before:
        return False
    r = k.n_outer
    for arg, v in zip(k.args, values):
        stride = getattr(v, "stride", None)
        for j, kd in enumerate(arg.dimmap):
            if kd == r and stride is not None and stride[j] != 1:
                return True
    return False
