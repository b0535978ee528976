"""``torch.compile(model, backend="loom")``: loom's own compiler.

Dynamo hands over a torch-level graph; AOTAutograd (with the decompositions
of decomp.py) turns it into ATen graphs: a forward and a backward (split by
min-cut rematerialization: cheap pointwise ops are recomputed in the
backward rather than saved), or one inference graph (with input mutations
kept in the graph, so that an optimizer's updates fuse). Each graph is
lowered to the fusion IR (lower.py, ops.py), fused (fuse.py), emitted as
one C module (emit_c.py) compiled by the JIT off the Python thread, and run
as a program (program.py). Without a C compiler, or when the compiler
fails, a graph runs as its own eager code on loom's library kernels, with
one warning; so, for now, does a graph with symbolic sizes (dynamic=True
or automatic dynamic shapes: kernels are specialized to their sizes).

Options (``torch.compile(..., options={...})``): none yet; ``mode`` is
accepted and ignored.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import time
import warnings

import torch

from . import jit, observe
from .decomp import decompositions
from .emit_c import CDialect
from .epilogue import fuse_epilogues
from .fuse import fuse
from .lower import lower
from .program import Program

_graph_ids = itertools.count()
_warned = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


class _Eager:
    """A graph run by its own code (the library's kernels), boxed."""
    _boxed_call = True

    def __init__(self, gm):
        self.gm = gm
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__

    def __call__(self, args):
        a = list(args)
        args.clear()
        return self.gm(*a)


def _symbolic(gm) -> bool:
    """Whether the graph has symbolic sizes (dynamic=True, or Dynamo's
    automatic dynamic shapes after a size changed): kernels are specialized
    to sizes for now, so such graphs run as their eager code."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            if isinstance(v, torch.SymInt) or (
                    isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in
                                                        list(v.shape) + list(v.stride()))):
                return True
    return False


def _name_kernels(program):
    """Names the kernels after the module's content: the same graph gets
    the same names and source in every process (the JIT's cache then
    serves it), and two graphs never share a name."""
    digest = hashlib.sha256(program.source.encode()).hexdigest()[:12]
    for i, k in enumerate(program.kernels):
        old, new = k.name, f"loom_{digest}_{i}"
        program.source = program.source.replace(f"int {old}(", f"int {new}(")
        program.py_source = program.py_source.replace(repr(old), repr(new))
        k.name = new


def compile_graph(gm: torch.fx.GraphModule, example_inputs, kind: str):
    """One ATen graph -> a boxed callable running it on loom."""
    start = time.perf_counter()
    tag = f"{kind}{next(_graph_ids)}"
    if not jit.available() or _symbolic(gm):
        observe.record_fallback()
        return _Eager(gm)
    log = observe.Log()
    graph, _ = lower(gm)
    fuse_epilogues(graph)
    log.graph(tag, graph)
    fuser = fuse(graph)
    program = Program(graph, fuser, gm, tag, CDialect(), log, name=_name_kernels)
    try:
        program.start()
    except jit.CompileError as error:
        _warn_once(("compile", type(error)), f"torch_loom: backend='loom' could not compile "
                   f"its kernels ({error}); graphs run on library kernels")
        observe.record_fallback()
        return _Eager(gm)
    program.fallback = _Eager(gm)
    observe.record_graph(program, time.perf_counter() - start)
    return program


def _compiler(kind):
    def compiler(gm, example_inputs):
        return compile_graph(gm, example_inputs, kind)
    return compiler


@functools.cache
def _aot():
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot_autograd(
        fw_compiler=_compiler("forward"),
        bw_compiler=_compiler("backward"),
        inference_compiler=_compiler("inference"),
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )


def loom_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend ``"loom"`` (also the entry point of the
    ``torch_dynamo_backends`` group)."""
    if kwargs.get("mode") == "reduce-overhead":  # captured and replayed (graphed.py)
        from .graphed import graphed_backend

        return graphed_backend(gm, example_inputs)
    return _aot()(gm, example_inputs)
