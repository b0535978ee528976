"""Graph capture and replay on loom: what ``torch.cuda``'s graphs offer.

A graph records the kernel launches, copies and event records and waits
that work on one loom stream enqueues, and :meth:`Graph.replay` runs them
again with one call into the runtime: no Python, no dispatcher, no
per-op allocation. Memory allocated during the capture comes from the
graph's private pool and keeps its addresses across replays; change the
contents of the captured tensors in place to feed a replay new data.

While a stream captures, nothing runs; so what waits for the device or
reads its results on the host (``synchronize()``, ``.item()``, ``.cpu()``,
``print(t)``) raises a ``RuntimeError`` naming the operation, and the
capture fails with it. A copy from (pageable) CPU memory records the
bytes it had at capture: feed new host data by copying it into a captured
loom tensor before the replay. Only the capturing stream is recorded.

Random ops (dropout, ``rand``, ``bernoulli``, ...) drawing from the
device's default generator draw fresh numbers at each replay, as in CUDA
graphs: a replay draws what the same ops would draw run eagerly in its
place, and moves the generator past them (the capture itself draws
nothing). So ``manual_seed(s)`` followed by n replays gives the numbers of
``manual_seed(s)`` followed by n eager runs, and ``manual_seed`` between
replays takes effect at the next one. A random op given another loom
generator is captured likewise once the graph registers it
(:meth:`Graph.register_generator_state`), else it fails the capture with
a ``RuntimeError`` naming the op.
"""

from __future__ import annotations

import gc

import torch
from torch.utils import _pytree as pytree

from .. import _C


def graph_pool_handle() -> tuple:
    """An opaque token naming a new memory pool, for graphs that share one
    (pass it as ``pool=`` to :class:`graph` or :meth:`Graph.capture_begin`)."""
    return (0, _C._graph_pool_handle())


def is_current_stream_capturing() -> bool:
    """True while the current loom stream captures a graph."""
    from . import _lazy_init

    _lazy_init()
    return _C._is_current_stream_capturing()


class Graph(torch.accelerator.Graph):
    """A loom graph (``torch.cuda.CUDAGraph``'s interface).

    ``capture_begin(pool=None)`` / ``capture_end()`` capture the current
    stream; ``replay()`` runs the capture on the current stream;
    ``reset()`` drops it; ``pool()`` names its memory pool for sharing.
    With ``keep_graph=True`` the capture stays inspectable and is
    instantiated by ``instantiate()`` or the first replay."""

    def __new__(cls, keep_graph: bool = False):
        _C._register_graph_impl()  # under the device type's name of now
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)
        self._generators: list = []  # [generator, counters a replay draws]

    def register_generator_state(self, generator: torch.Generator) -> None:
        """Lets the random ops of the next capture draw from ``generator``
        (a loom generator other than the device's default one, which every
        capture registers): each replay then draws from its state at that
        replay, as for the default generator. Call it before capture_begin."""
        if any(g is generator for g, _ in self._generators):
            return
        if _C._generator_register_graph(generator):  # not the default one
            self._generators.append([generator, 0])

    def capture_begin(self, pool=None, capture_error_mode: str | None = None) -> None:
        pool = self.graph_pool if pool is None else pool
        mode = capture_error_mode or self.capture_error_mode
        torch._C._acceleratorGraph.capture_begin(self, pool=pool, capture_error_mode=mode)
        begun = []
        try:
            for entry in self._generators:
                _C._generator_capture_prologue(entry[0])
                begun.append(entry)
        except BaseException:
            for entry in begun:
                _C._generator_capture_epilogue(entry[0])
            self.reset()
            raise

    def capture_end(self) -> None:
        try:
            super().capture_end()
        finally:
            for entry in self._generators:
                entry[1] = _C._generator_capture_epilogue(entry[0])

    def replay(self) -> None:
        for generator, increment in self._generators:
            _C._generator_replay_prologue(generator, increment)
        super().replay()


_capture_streams: dict = {}


class graph:
    """Captures the work of its block into ``loom_graph`` (a :class:`Graph`),
    on ``stream`` (default: a side stream kept for captures), allocating
    from ``pool`` (a :func:`graph_pool_handle` or another graph's
    ``pool()``; default: the graph's own).

    The device is synchronized first, so the capture starts after the work
    enqueued before it. On an exception inside the block the capture is
    dropped and the exception propagates."""

    def __init__(self, loom_graph: Graph, pool=None, stream=None,
                 capture_error_mode: str = "global"):
        from . import current_device
        from .streams import Stream, stream as stream_ctx

        if stream is None:
            device = current_device()
            stream = _capture_streams.get(device)
            if stream is None:
                stream = _capture_streams[device] = Stream(device)
        self.loom_graph = loom_graph
        self.pool = pool
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        self.stream_ctx = stream_ctx(stream)

    def __enter__(self):
        from . import empty_cache, synchronize

        synchronize()
        if torch.compiler.config.force_cudagraph_gc:  # as torch.cuda.graph: costly
            gc.collect()
        empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.loom_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, tb):
        try:
            self.loom_graph.capture_end()
        except RuntimeError:
            if exc_type is None:
                raise
            self.loom_graph.reset()  # the block's own exception says why
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


# ---- make_graphed_callables ----------------------------------------------------------


def _check_callable(c, flat_args):
    if isinstance(c, torch.nn.Module):
        if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
            raise RuntimeError("make_graphed_callables: modules must have no hooks when they are "
                               "passed (hooks registered afterwards are allowed)")
        if any(b.requires_grad for b in c.buffers()):
            raise RuntimeError("make_graphed_callables: only parameters may be trainable; "
                               "buffers must have requires_grad=False")
    if not all(isinstance(a, torch.Tensor) for a in flat_args):
        raise TypeError("make_graphed_callables: sample_args may contain only tensors")


def _grads(outputs, inputs, grad_outputs, allow_unused):
    return torch.autograd.grad(outputs=outputs, inputs=tuple(i for i in inputs if i.requires_grad),
                               grad_outputs=grad_outputs, only_inputs=True,
                               allow_unused=allow_unused)


def _graphed_function(fwd, bwd, params, n_user, spec, surface, outs, grad_outs, grad_ins):
    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, given in zip(surface[:n_user], inputs[:n_user]):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            fwd.replay()
            return tuple(o.detach() for o in outs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, given in zip(grad_outs, grads):
                if static is not None and given is not None and static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            bwd.replay()
            return tuple(g.detach() if g is not None else None for g in grad_ins)

    def graphed(*user_args):
        flat = pytree.arg_tree_leaves(*user_args)
        return pytree.tree_unflatten(Graphed.apply(*(tuple(flat) + params)), spec)

    return graphed


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None):
    """Graphed versions of ``callables`` (functions or modules, a tuple of
    them or one), as ``torch.cuda.make_graphed_callables`` makes them:
    each is run ``num_warmup_iters`` times on a side stream, then its
    forward and its backward (over the tensors of ``sample_args`` and the
    module's parameters that require grad) are captured into two graphs
    that share one pool; calling the result copies the arguments into the
    captured inputs and replays. A graphed module falls back to its own
    forward when its training mode differs from the captured one."""
    from . import synchronize
    from .streams import Stream, stream

    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast cache; "
                           "use autocast(cache_enabled=False)")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    flat_args = [tuple(pytree.arg_tree_leaves(*args)) for args in sample_args]
    for c, flat in zip(callables, flat_args):
        _check_callable(c, flat)
    params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else () for c in callables]
    surfaces = [flat + p for flat, p in zip(flat_args, params)]
    fwd_graphs = [Graph() for _ in callables]
    bwd_graphs = [Graph() for _ in callables]
    mempool = graph_pool_handle() if pool is None else pool

    synchronize()
    with stream(Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            outputs = needing = None
            for _ in range(num_warmup_iters):
                outputs = pytree.tree_leaves(func(*args))
                needing = tuple(o for o in outputs if o.requires_grad)
                if needing:
                    _grads(needing, surface, tuple(torch.empty_like(o) for o in needing),
                           allow_unused_input)
            del outputs, needing
    synchronize()

    static_outs, specs = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=mempool):
            result = func(*args)
        flat, spec = pytree.tree_flatten(result)
        static_outs.append(tuple(flat))
        specs.append(spec)

    # Backward graphs in reverse order, as autograd would run them.
    grad_outs_all, grad_ins_all = [], []
    for surface, outs, g in zip(reversed(surfaces), reversed(static_outs), reversed(bwd_graphs)):
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outs)
        needing = tuple(o for o in outs if o.requires_grad)
        grad_inputs = None
        if needing:
            with graph(g, pool=mempool):
                grad_inputs = _grads(needing, surface, tuple(x for x in grad_outs if x is not None),
                                     allow_unused_input)
        it = iter(grad_inputs or ())
        grad_ins_all.append(tuple(next(it) if a.requires_grad and grad_inputs is not None else None
                                  for a in surface))
        grad_outs_all.append(grad_outs)
    grad_outs_all.reverse()
    grad_ins_all.reverse()

    result = []
    for i, func in enumerate(callables):
        graphed = _graphed_function(fwd_graphs[i], bwd_graphs[i], params[i], len(flat_args[i]),
                                    specs[i], surfaces[i], static_outs[i], grad_outs_all[i],
                                    grad_ins_all[i])
        if isinstance(func, torch.nn.Module):
            func.forward = _mode_switch(func, func.training, graphed, func.forward)
            result.append(func)
        else:
            result.append(graphed)
    return result[0] if just_one else tuple(result)


def _mode_switch(module, training, graphed, eager):
    def forward(*args, **kwargs):
        return graphed(*args, **kwargs) if module.training == training else eager(*args, **kwargs)
    return forward


__all__ = ["Graph", "graph", "graph_pool_handle", "is_current_stream_capturing",
           "make_graphed_callables"]
