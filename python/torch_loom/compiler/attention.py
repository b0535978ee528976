"""The attention backward writing its three gradients into the gradient of
the projection the heads were split from.

A transformer's attention takes q, k and v as heads of one fused
projection: ``qkv.split(C, dim=-1)``, each viewed as [B, T, H, d] and
transposed to [B, H, T, d]. In the backward graph the attention backward's
dq, dk and dv come back through the transposes and views and are
concatenated (the split's gradient): ``cat([view(permute(dq)), ...], dim)``,
three copies of the whole gradient. The attention kernels write their
gradients through any strides of a 4-d tensor, so this pass allocates the
concatenation's result and hands the backward (``loom::sdpa_backward_into``,
csrc/ops/nn/nn_attention.cpp) the views of it where each gradient would be
copied to: the same values, written once, and no copy.

Only where every gradient reaches the cat through views alone (permute,
view) that nothing else reads, and the views of the cat's slices exist
(checked on meta tensors).
"""

from __future__ import annotations

import functools

import torch

from . import ir, observe
from .ir import Library, Value

aten = torch.ops.aten

#: Whether the pass runs (off: for measuring its worth).
ENABLED = True

_VIEWS = ("permute", "view")


@functools.cache
def _ops():
    import torch_loom  # noqa: F401  (the op is registered by the extension)

    return (aten._scaled_dot_product_fused_attention_overrideable_backward.default,
            torch.ops.loom.sdpa_backward_into.default, aten.cat.default,
            {aten.permute.default: "permute", aten.view.default: "view",
             aten._unsafe_view.default: "view"})


def _chain(v, views, sole):
    """(source value, [(kind, arg)] from the source to v) following v back
    through view nodes whose results only the next step reads."""
    steps = []
    while isinstance(v.producer, Library) and v.producer.target in views:
        p = v.producer
        if len(p.args) != 2 or p.kwargs or not isinstance(p.args[0], Value) or \
                len(v.users) != 1 or v in sole:
            break
        kind = views[p.target]
        # a permute's dims; a view's input shape (what undoing it views to)
        steps.append((kind, tuple(int(x) for x in p.args[1]) if kind == "permute"
                      else tuple(p.args[0].shape)))
        v = p.args[0]
    return v, steps[::-1]


def _targets(shape, stride, dim, pieces, dtype):
    """On a meta tensor of the cat's result: each piece's slice, viewed back
    through its chain to the gradient's shape (None where a view does not
    exist)."""
    try:
        return _slices(torch.empty_strided(shape, stride, dtype=dtype, device="meta"), dim, pieces)
    except RuntimeError:
        return None


def _slices(g, dim, pieces):
    """Each piece's slice of g along dim, viewed back through its chain."""
    views, offset = [], 0
    for size, steps in pieces:
        views.append(_undo(g.narrow(dim, offset, size), steps))
        offset += size
    return views


def _undo(t, steps):
    """t viewed back through `steps` (the chain from a gradient to t): to
    each view's input shape, through each permute's inverse."""
    for kind, arg in reversed(steps):
        if kind == "permute":
            inv = [0] * len(arg)
            for i, p in enumerate(arg):
                inv[p] = i
            t = t.permute(inv)
        else:
            t = t.view(arg)
    return t


def packed_backward(op, shape, stride, dim, pieces, grad_out, q, k, v, bias, out, lse,
                    is_causal, scale):
    """The cat's result, with the attention backward's gradients written into
    its slices (the program's call for a rewritten cat)."""
    g = torch.empty_strided(shape, stride, dtype=q.dtype, device=q.device)
    op(grad_out, q, k, v, bias, out, lse, is_causal, scale, *_slices(g, dim, pieces))
    return g


def _rewrite(graph, cat, backward, views, op, outputs):
    if len(cat.args) not in (1, 2) or cat.kwargs or len(cat.outputs) != 1:
        return None
    tensors = cat.args[0]
    res = cat.outputs[0]
    dim = cat.args[1] if len(cat.args) == 2 else 0
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 3 or res.stride is None:
        return None
    dim = dim % len(res.shape)
    sources, chains = [], []
    for t in tensors:
        if not isinstance(t, Value):
            return None
        src, steps = _chain(t, views, outputs)
        sources.append(src)
        chains.append((t, steps))
    node = sources[0].producer
    if not (isinstance(node, Library) and node.target is backward and
            len(node.args) in (16, 17) and set(node.kwargs) <= {"scale"} and
            [getattr(s, "producer", None) for s in sources] == [node] * 3 and
            list(getattr(node, "slots", [])[:3]) == sources):
        return None
    (grad_out, q, k, v, bias, mask, out, lse, _cq, _ck, _mq, _mk, dropout, causal,
     _seed, _off) = node.args[:16]
    scale = node.args[16] if len(node.args) == 17 else node.kwargs.get("scale")
    if dropout != 0 or list(mask)[:3] != [True, True, True] or \
            (len(node.slots) > 3 and node.slots[3] is not None and node.slots[3].users):
        return None
    if any(s in outputs or len(s.users) != 1 for s in sources):
        return None
    if any(not (isinstance(s, Value) and s.device is not None and s.device.type == "loom")
           for s in (q, k, v, grad_out, out)):
        return None
    pieces = [(t.shape[dim], tuple(steps)) for t, steps in chains]
    targets = _targets(res.shape, res.stride, dim, pieces, res.dtype)
    if targets is None or [tuple(t.shape) for t in targets] != [tuple(s.shape) for s in sources]:
        return None
    if any(t.dim() != 4 and not t.is_contiguous() for t in targets):
        return None
    call = functools.partial(packed_backward, op)
    call.__name__ = "packed_attention_backward"
    lib = Library(call, (tuple(res.shape), tuple(res.stride), dim, tuple(pieces), grad_out, q, k,
                         v, bias, out, lse, bool(causal), scale), {},
                  outputs=[res])
    lib.const = None
    lib.view = None
    drop = {cat, node}  # and every view node between a gradient and the cat
    for t, steps in chains:
        x = t
        for _ in steps:
            drop.add(x.producer)
            x = x.producer.args[0]
    at = graph.nodes.index(cat)
    nodes = [n for i, n in enumerate(graph.nodes) if n not in drop or i == at]
    graph.nodes = [lib if n is cat else n for n in nodes]
    res.producer = lib
    graph.relink()
    return lib


def pack_attention_gradients(graph: ir.Graph) -> int:
    """Rewrites each cat of an attention backward's three gradients (through
    views) into one call writing them in place; returns how many."""
    if not ENABLED:
        return 0
    try:
        backward, op, cat, views = _ops()
    except (AttributeError, RuntimeError):
        return 0
    outputs = {v for v in graph.outputs if v is not None}
    done = 0
    for node in list(graph.nodes):
        if isinstance(node, Library) and node.target is cat and node in graph.nodes:
            if _rewrite(graph, node, backward, views, op, outputs) is not None:
                done += 1
    if done:
        observe.record_attention_packed(done)
    return done
