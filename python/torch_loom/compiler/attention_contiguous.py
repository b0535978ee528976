"""The attention over contiguous copies of strided heads, its results in the
layout the graph traced.

The heads of a fused qkv projection are strided [B, H, T, d] views of it
(rows of T strided by 3 C). The attention kernels read bfloat16 heads
faster contiguous: a layer's forward and backward over copies, the copies
included, take about nine tenths of their time over the views. Each
attention forward, backward and packed backward (attention.py) whose
operands (q, k, v; in the backward also the output gradient and the
output) are strided views runs over contiguous copies of them. The kernels
give the same bits over views and over copies.

An attention's results take its operands' layout (over the views the
output lies [B, T, H, d] in memory; over copies [B, H, T, d]), but the
program trusts the traced metadata (views rebuilt by ``as_strided`` with
traced strides, merges of the heads), so each result whose layout differs
from the traced one is copied into a tensor with the traced strides. The
packed backward writes its gradients into the given slices, whatever its
operands' layout.
"""

from __future__ import annotations

import functools

import torch

from . import attention, ir, observe
from .ir import Library, Value

aten = torch.ops.aten

#: Whether the pass runs (off: for measuring its worth).
ENABLED = True

#: The dtypes whose heads are copied (float32 attention gains nothing).
DTYPES = {torch.bfloat16, torch.float16}

# Positions of the operands copied: forward (q, k, v); backward (grad_out,
# q, k, v, out); the packed backward's op, as attention.packed_backward
# calls it (grad_out, q, k, v, out).
_FORWARD_ARGS = (0, 1, 2)
_BACKWARD_ARGS = (0, 1, 2, 3, 6)
_PACKED_OP_ARGS = (0, 1, 2, 3, 5)
_PACKED_ARGS = (4, 5, 6, 7, 9)  # the same operands in the packed node's args


@functools.cache
def _ops():
    return (aten._scaled_dot_product_fused_attention_overrideable.default,
            aten._scaled_dot_product_fused_attention_overrideable_backward.default)


def _contiguous(args, positions):
    args = list(args)
    for i in positions:
        args[i] = args[i].contiguous()
    return args


def _traced(result, layouts):
    """result with each tensor whose strides differ from its traced ones
    copied into the traced layout."""
    out = list(result)
    for j, layout in layouts:
        r = out[j]
        if r is not None and r.stride() != layout[1] and r.numel() > 0:
            t = torch.empty_strided(layout[0], layout[1], dtype=r.dtype, device=r.device)
            t.copy_(r)
            out[j] = t
    return tuple(out)


def contiguous_attention(op, positions, layouts, *args, **kwargs):
    """op over contiguous copies of args[positions]; its results in the
    traced layouts [(slot, (shape, stride))]."""
    return _traced(op(*_contiguous(args, positions), **kwargs), layouts)


def _contiguous_op(op, *args):
    """The packed backward's op over contiguous copies of its operands."""
    return op(*_contiguous(args, _PACKED_OP_ARGS))


def _strided(values):
    """Whether any of values is a tensor of DTYPES not contiguous as traced."""
    found = False
    for v in values:
        if not isinstance(v, Value) or v.stride is None or v.device is None or \
                v.device.type != "loom":
            return False
        if v.dtype in DTYPES and not _is_contiguous(v.shape, v.stride):
            found = True
    return found


def _is_contiguous(shape, stride):
    expected = 1
    for size, st in reversed(list(zip(shape, stride))):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


def _rewrite(node, forward, backward):
    if node.target is forward or node.target is backward:
        positions = _FORWARD_ARGS if node.target is forward else _BACKWARD_ARGS
        if not node.multi or len(node.args) <= max(positions) or \
                not _strided([node.args[i] for i in positions]):
            return False
        layouts = tuple((j, (tuple(v.shape), tuple(v.stride)))
                        for j, v in enumerate(node.slots) if v is not None and v.stride is not None)
        call = functools.partial(contiguous_attention, node.target, positions, layouts)
        call.__name__ = "contiguous_attention"
        node.target = call
        return True
    target = node.target
    if isinstance(target, functools.partial) and target.func is attention.packed_backward and \
            len(target.args) == 1 and len(node.args) > max(_PACKED_ARGS) and \
            _strided([node.args[i] for i in _PACKED_ARGS]):
        call = functools.partial(attention.packed_backward,
                                 functools.partial(_contiguous_op, target.args[0]))
        call.__name__ = "packed_contiguous_attention_backward"
        node.target = call
        return True
    return False


def contiguous_attention_operands(graph: ir.Graph) -> int:
    """Makes each attention over strided bfloat16/float16 heads run over
    contiguous copies (results in the traced layout); returns how many."""
    if not ENABLED:
        return 0
    forward, backward = _ops()
    done = sum(_rewrite(n, forward, backward) for n in graph.nodes if isinstance(n, Library))
    if done:
        observe.record_attention_contiguous(done)
    return done
