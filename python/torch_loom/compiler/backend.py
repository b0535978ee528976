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
one warning. A graph with symbolic sizes (dynamic=True or automatic
dynamic shapes) gets a program per concrete input signature, all sharing
one C module whose kernels read their sizes from their arguments.

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
from .attention import pack_attention_gradients
from .attention_contiguous import contiguous_attention_operands
from .batchnorm import fuse_batch_norms
from .epilogue import fuse_epilogues
from .fuse import fuse
from .inplace import scatter_in_place
from .linear import fuse_linear_layers
from .lower import lower
from .planes import share_conv_planes
from .program import Program
from .views import collapse_view_chains
from .tangents import Tangents, no_zero_gradients, tangent_positions

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
    automatic dynamic shapes after a size changed)."""
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


class _Dynamic:
    """A graph with symbolic sizes (dynamic=True, or Dynamo's automatic
    dynamic shapes): a program per concrete signature of its inputs, built
    when that signature first comes, from the graph's metadata propagated
    with those sizes. Kernels read their sizes from their arguments, so
    the programs of one graph share one C module: the C compiler runs once
    per shape kind, not per size."""
    _boxed_call = True
    MAX_PROGRAMS = 256

    def __init__(self, gm, tag):
        self.gm = gm
        self.tag = tag
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.programs = {}

    def __call__(self, args):
        key = tuple(_signature(a) for a in args)
        program = self.programs.get(key)
        if program is None:
            if len(self.programs) >= self.MAX_PROGRAMS:
                self.programs.pop(next(iter(self.programs)))
            program = self.programs[key] = self._specialize(args)
        return program(args)

    def _specialize(self, args):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        start = time.perf_counter()
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fakes = [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a
                 for a in args]
        FakeTensorProp(self.gm, mode).propagate_dont_convert_inputs(*fakes)
        tag = f"{self.tag}.{len(self.programs)}"
        return _build(self.gm, tag, start, specialization=True)


def _signature(a):
    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), a.stride(), a.dtype, a.device, a.storage_offset())
    return (type(a), a)


def compile_graph(gm: torch.fx.GraphModule, example_inputs, kind: str):
    """One ATen graph -> a boxed callable running it on loom."""
    start = time.perf_counter()
    tag = f"{kind}{next(_graph_ids)}"
    scatter_in_place(gm)
    if not jit.available():
        observe.record_fallback()
        return _Eager(gm)
    if _symbolic(gm):
        observe.record_dynamic_graph()
        return _Dynamic(gm, tag)
    return _build(gm, tag, start)


def _build(gm, tag, start, specialization=False):
    """The program of a graph whose metadata has concrete sizes."""
    log = observe.Log()
    graph, _ = lower(gm)
    fuse_epilogues(graph)
    fuse_batch_norms(graph)
    pack_attention_gradients(graph)
    contiguous_attention_operands(graph)
    fuse_linear_layers(graph)
    collapse_view_chains(graph)
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
    observe.record_graph(program, time.perf_counter() - start, specialization)
    return program


def _compiler(kind):
    def compiler(gm, example_inputs):
        compiled = compile_graph(gm, example_inputs, kind)
        if kind == "forward":
            compiled._loom_forward = True  # its outputs' gradients need not be materialized
        elif kind == "backward" and tangent_positions(gm):
            return Tangents(gm, compiled, lambda g: compile_graph(g, None, kind))
        return compiled
    return compiler


def _partition(joint_module, joint_inputs, **kwargs):
    """Min-cut rematerialization, after the joint graph's rewrites that
    need both passes in view (planes.py)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    share_conv_planes(joint_module)
    return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


@functools.cache
def _aot(compiler_for=_compiler):
    """AOTAutograd around the compiler ``compiler_for(kind)`` of each graph
    kind (forward, backward, inference); reduce-overhead passes its own."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=compiler_for("forward"),
        bw_compiler=compiler_for("backward"),
        inference_compiler=compiler_for("inference"),
        partition_fn=_partition,
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )


def loom_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend ``"loom"`` (also the entry point of the
    ``torch_dynamo_backends`` group)."""
    if kwargs.get("mode") == "reduce-overhead":  # captured and replayed (graphed.py)
        from .graphed import graphed_backend

        return graphed_backend(gm, example_inputs)
    return no_zero_gradients(_aot()(gm, example_inputs))
