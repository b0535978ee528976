"""A linear layer's product as one library call: ``aten.linear``.

AOTAutograd spells ``F.linear(x, w, b)`` over a [batch, seq, features]
input as four ops: ``view(x, [M, K])``, ``permute(w, [1, 0])``,
``addmm(b, ·, ·)`` and ``view(·, [batch, seq, N])``; a program runs each
as a call from Python (a few microseconds each, the step of a small model
at one token is made of such calls). ``aten.linear`` runs the same ops
from C++: a contiguous input with a 1-d bias is viewed as [M, K], the
product is ``addmm(b, x, w.t())``, viewed back (2-d: the addmm alone). The
same kernel on the same operands: eager's bits.

The pass runs on the graph IR before fusion. It takes an ``addmm`` with
beta = alpha = 1, a 1-d bias, and a second operand that is the
transposition of a 2-d weight read by nothing else; its first operand is
either 2-d, or the [M, K] view of a contiguous tensor read by nothing else,
whose [..., N] view of the product (the only reader of the product) then
becomes the linear layer's result.
"""

from __future__ import annotations

import torch

from . import ir
from .ir import Library, Value

aten = torch.ops.aten

_TRANSPOSE = (aten.permute.default, aten.t.default)


def _only_reader(v, node) -> bool:
    return isinstance(v, Value) and v.users == [node]


def _transposed_weight(m2, addmm):
    """w where m2 = w.t() (or permute(w, [1, 0])) read by addmm alone."""
    p = m2.producer if isinstance(m2, Value) else None
    if not (isinstance(p, Library) and p.target in _TRANSPOSE and _only_reader(m2, addmm)):
        return None
    w = p.args[0]
    if not isinstance(w, Value) or len(w.shape) != 2:
        return None
    if p.target is aten.permute.default and list(p.args[1]) not in ([1, 0], [-1, -2], [1, -2],
                                                                      [-1, 0]):
        return None
    return w


def _flattened(m1, addmm):
    """x where m1 = view(x, [M, K]) of a contiguous x read by addmm alone."""
    p = m1.producer
    if not (isinstance(p, Library) and p.target is aten.view.default and _only_reader(m1, addmm)):
        return None
    x = p.args[0]
    if not isinstance(x, Value) or len(x.shape) < 3 or x.stride is None or \
            x.stride != ir.contiguous_strides(x.shape) or x.shape[-1] != m1.shape[1]:
        return None
    return x


def _viewed_back(out, x, n):
    """The view of the product to x's leading dims and n features, when it
    is the product's only reader."""
    if len(out.users) != 1:
        return None
    v = out.users[0]
    if not (isinstance(v, Library) and v.target is aten.view.default and v.args[0] is out
            and len(v.outputs) == 1):
        return None
    return v if v.outputs[0].shape == tuple(x.shape[:-1]) + (n,) else None


def fuse_linear_layers(graph: ir.Graph) -> int:
    """Rewrites the graph's linear layers into aten.linear calls; returns
    how many."""
    done = 0
    for a in list(graph.nodes):
        if not (isinstance(a, Library) and a.target is aten.addmm.default and len(a.args) == 3):
            continue
        if any(a.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) or \
                set(a.kwargs) - {"beta", "alpha"}:
            continue
        b, m1, m2 = a.args
        out = a.outputs[0] if len(a.outputs) == 1 else None
        w = _transposed_weight(m2, a)
        if out is None or w is None or not isinstance(b, Value) or b.shape != (w.shape[0],) \
                or not isinstance(m1, Value):
            continue
        outputs = {id(v) for v in graph.outputs if v is not None}
        if id(m2) in outputs:
            continue
        drop = [m2.producer]
        x, result = m1, out
        flat = _flattened(m1, a) if id(m1) not in outputs and id(out) not in outputs else None
        back = _viewed_back(out, flat, w.shape[0]) if flat is not None else None
        if back is not None:
            x, result = flat, back.outputs[0]
            drop += [m1.producer, back]
        lin = Library(aten.linear.default, (x, w, b), {}, outputs=[result])
        lin.slots, lin.const, lin.view = [result], None, None
        i = graph.nodes.index(a)
        graph.nodes[i] = lin
        result.producer = lin
        graph.nodes = [n for n in graph.nodes if not any(n is d for d in drop)]
        graph.relink()
        done += 1
    return done
