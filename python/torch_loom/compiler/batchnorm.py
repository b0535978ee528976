"""Batch norm with the ReLU after it, forward and backward, as one library
call each (``loom::batch_norm_relu``, ``loom::batch_norm_relu_backward``,
csrc/ops/nn/nn_batch_norm_act.cpp; contracts in
``loom/kernels/norm_batch_act.h``).

Batch norm stays whole through the decompositions (decomp.py): its
statistics reduce over every dim but the channels, which the library walks
along memory. The ReLU after it (a convolutional block's
``relu(bn(conv(x)))``, or ``relu(bn(conv(x)) + shortcut)`` at the end of a
residual block) would be a pass of its own over the normalized tensor; the
fused kernel applies it (after the residual add) to each row as it
normalizes it. In the backward graph, ``threshold_backward(dy, y, 0)``
(the ReLU's gradient, y its output) feeding batch norm's backward would
write a masked copy of dy that batch norm's backward reads twice; the fused
kernel masks dy as it sums it (and still writes the masked copy where other
ops read it: a residual block's shortcut). Both give the unfused ops' bits.

The pass runs on the graph IR before fusion, as the GEMM epilogues do. It
takes float32 loom tensors in training mode only, where the normalized
tensor has no reader but the op fused into the call.
"""

from __future__ import annotations

import functools

import torch

from . import ir
from .epilogue import _depends
from .ir import Library, Pointwise, Ref, Value

aten = torch.ops.aten

#: Whether batch norms take their ReLUs (off: for measuring the fusion's worth).
ENABLED = True


@functools.cache
def _ops():
    import torch_loom  # noqa: F401  (the ops are registered by the extension)

    return torch.ops.loom.batch_norm_relu.default, torch.ops.loom.batch_norm_relu_backward.default


def _strides(v):
    """v's strides when the fused call gives a result like v those strides:
    contiguous, or channels last for a 4-d channels-last input that is not
    also contiguous (as the library's batch norm does); None for any other
    layout."""
    if v.stride is None:
        return None
    shape, stride = tuple(v.shape), tuple(v.stride)
    if stride == ir.contiguous_strides(shape):
        return stride
    if len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] > 1:
        n, c, h, w = shape
        cl = ir.contiguous_strides((n, h, w, c))
        cl = (cl[0], cl[3], cl[1], cl[2])
        if stride == cl:
            return cl
    return None


def _dense(v, like=None) -> bool:
    """A float32 loom tensor of at least 2 dims, contiguous or channels last
    (in `like`'s layout when given)."""
    if not (isinstance(v, Value) and v.device is not None and v.device.type == "loom" and
            v.dtype == torch.float32 and len(v.shape) >= 2 and v.numel > 0):
        return False
    stride = _strides(v)
    if like is None:
        return stride is not None
    return stride is not None and tuple(v.shape) == tuple(like.shape) and \
        stride == tuple(like.stride)


def _channel(v, c) -> bool:
    return isinstance(v, Value) and v.device is not None and v.device.type == "loom" and \
        v.dtype == torch.float32 and tuple(v.shape) == (c,)


def _reads(n, v) -> bool:
    """Whether Pointwise n reads v elementwise at the same index."""
    return any(isinstance(o, Ref) and o.value is v and tuple(o.access) == tuple(range(len(v.shape)))
               for o in n.operands)


def _elementwise(n, op, arity, shape) -> bool:
    return isinstance(n, Pointwise) and n.op == op and n.kind == ir.F32 and not n.params and \
        len(n.operands) == arity and n.out.alias is None and n.out.dtype == torch.float32 and \
        tuple(n.out.shape) == tuple(shape) and all(
            isinstance(o, Ref) and tuple(o.access) == tuple(range(len(shape))) for o in n.operands)


def _replace(graph, drop, lib, at):
    """graph.nodes without `drop`, with `lib` after the node at `at`."""
    nodes = []
    for i, n in enumerate(graph.nodes):
        if n not in drop:
            nodes.append(n)
        if i == at:
            nodes.append(lib)
    graph.nodes = nodes
    for v in lib.outputs:
        v.producer = lib
    graph.relink()


def _library(op, args, slots):
    lib = Library(op, tuple(args), {}, outputs=[v for v in slots if v is not None], multi=True)
    lib.slots = list(slots)
    lib.const = None
    lib.view = None
    return lib


def _forward(graph, node, position, outputs, op):
    """relu(bn(x)) or relu(bn(x) + r) from `node` -> one call, or None."""
    if not (isinstance(node, Library) and
            node.target is aten._native_batch_norm_legit_functional.default and
            len(node.args) == 8 and not node.kwargs):
        return None
    x, w, b, rm, rv, training, momentum, eps = node.args
    if training is not True or not _dense(x) or len(node.slots) != 5:
        return None
    c = x.shape[1]
    if not all(p is None or _channel(p, c) for p in (w, b)) or not _channel(rm, c) or \
            not _channel(rv, c):
        return None
    out = node.slots[0]
    users = [u for u in out.users if u in position]
    if out in outputs or len(users) != 1 or not _dense(out, x):
        return None
    u = users[0]
    residual, members = None, [u]
    if _elementwise(u, "add", 2, out.shape):
        others = [o.value for o in u.operands if o.value is not out]
        if len(others) != 1 or not _dense(others[0], x) or _depends(others[0], node):
            return None
        residual = others[0]
        readers = [r for r in u.out.users if r in position]
        if u.out in outputs or len(readers) != 1:
            return None
        u = readers[0]
        members.append(u)
        if not (_elementwise(u, "relu", 1, out.shape) and _reads(u, members[0].out)):
            return None
    elif not (_elementwise(u, "relu", 1, out.shape) and _reads(u, out)):
        return None
    final = u.out
    if not _dense(final, x):
        return None
    at = max(position[node], position.get(residual.producer, -1) if residual is not None else -1)
    later = [r for v in node.slots[1:] for r in v.users if r in position and r not in members]
    if any(position[r] <= at for r in later):
        return None
    lib = _library(op, (x, w, b, rm, rv, residual, float(momentum), float(eps)),
                   [final] + list(node.slots[1:]))
    lib.fused_relu = "batch_norm_relu"
    _replace(graph, set(members) | {node}, lib, at)
    return lib


def _relayout(v, x, reader, outputs):
    """Gives v x's layout when a pointwise kernel makes v for `reader` alone
    (the gradient of a pooling expanded over a channels-last activation is
    made contiguous): the fused call then reads it where it lies instead of
    copying it into x's layout."""
    p = v.producer if isinstance(v, Value) else None
    if isinstance(p, Pointwise) and v.alias is None and v not in outputs and \
            all(u is reader for u in v.users) and tuple(v.shape) == tuple(x.shape) and \
            _dense(v) and _dense(x):
        v.stride = tuple(x.stride)


def _backward(graph, node, position, outputs, op):
    """native_batch_norm_backward(threshold_backward(dy, y, 0), ...) -> one
    call, or None."""
    if not (isinstance(node, Library) and node.target is aten.native_batch_norm_backward.default
            and len(node.args) == 10 and not node.kwargs):
        return None
    gm, x, w, rm, rv, sm, si, train, eps, mask = node.args
    if train is not True or list(mask) != [True, True, True] or not _dense(x) or \
            not _dense(gm, x):
        return None
    c = x.shape[1]
    if not _channel(w, c) or not _channel(sm, c) or not _channel(si, c):
        return None
    tb = gm.producer
    if not (isinstance(tb, Pointwise) and tb.op == "threshold_backward" and tb.kind == ir.F32 and
            len(tb.params) == 1 and tb.params[0] == 0 and tb.out.alias is None):
        return None
    # other readers of the masked gradient (a residual block's shortcut)
    # get it from the fused call, which must run before them
    others = [u for u in gm.users if u in position and u is not node]
    keep = gm in outputs or bool(others)
    if any(position[u] <= position[node] for u in others):
        return None
    if len(tb.operands) != 2 or not all(isinstance(o, Ref) and tuple(o.access) == tuple(range(
            len(x.shape))) for o in tb.operands):
        return None
    dy, y = (o.value for o in tb.operands)
    if not _dense(y, x):
        return None
    _relayout(dy, x, tb, outputs)
    if not _dense(dy, x):
        return None
    lib = _library(op, (dy, y, x, w, sm, si, keep), list(node.slots) + ([gm] if keep else []))
    lib.fused_relu = "batch_norm_relu_backward"
    _replace(graph, {tb, node}, lib, position[node])
    return lib


def fuse_batch_norms(graph: ir.Graph) -> int:
    """Rewrites each batch norm with its ReLU (forward) and each batch-norm
    backward of a ReLU's gradient into one library call; returns how many."""
    if not ENABLED:
        return 0
    try:
        fwd, bwd = _ops()
    except (AttributeError, RuntimeError):
        return 0
    outputs = {v for v in graph.outputs if v is not None}
    done = 0
    for node in list(graph.nodes):
        position = {n: i for i, n in enumerate(graph.nodes)}
        if node not in position:
            continue
        if _forward(graph, node, position, outputs, fwd) is not None or \
                _backward(graph, node, position, outputs, bwd) is not None:
            done += 1
    return done
