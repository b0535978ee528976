"""A chain of views that library ops read, as one ``as_strided`` call.

Splitting a fused projection into attention heads is a ``view`` and a
``permute`` per tensor, and merging the heads back a ``permute`` and two
``view``s: metadata only, but each a call from Python in a program. Views
that keep their base's storage offset (view, permute, transpose, t,
unsqueeze, squeeze, expand, alias) compose into one view whose sizes and
strides the graph's metadata gives (eager's strides, computed from the
base's); ``as_strided(base, sizes, strides)``, which keeps the base's
offset, is that view in one call.

Only chains whose result is read by library ops alone are rewritten: a
generated kernel reads through a view chain without it (the fuser follows
the views' dim maps), and its fusion is left as it is. Each intermediate
view must be read by the next view alone and be no graph output.

A chain whose result has its base's sizes and strides (a weight
transposed for the forward's product and back for the backward's) is its
base: its readers take the base, and no call is made.
"""

from __future__ import annotations

import torch

from . import ir
from .ir import Library, Value

aten = torch.ops.aten

#: Views whose result starts where their base starts.
SAME_OFFSET = (
    aten.view.default, aten._unsafe_view.default, aten.permute.default, aten.transpose.int,
    aten.t.default, aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.expand.default, aten.alias.default,
)


def _is_view(n) -> bool:
    return isinstance(n, Library) and n.target in SAME_OFFSET and len(n.outputs) == 1 and \
        not n.multi and n.args and isinstance(n.args[0], Value)


def collapse_view_chains(graph: ir.Graph) -> int:
    """Rewrites chains of two or more views into as_strided calls; returns
    how many views went."""
    outputs = {id(v) for v in graph.outputs if v is not None}
    removed = 0
    for n in reversed(list(graph.nodes)):
        if not _is_view(n) or not any(m is n for m in graph.nodes):
            continue
        out = n.outputs[0]
        if out.stride is None or not out.users or \
                not all(isinstance(u, Library) for u in out.users):
            continue
        chain, base = [n], n.args[0]
        while _is_view(base.producer) and base.users == [chain[-1]] and id(base) not in outputs \
                and base.stride is not None:
            chain.append(base.producer)
            base = base.producer.args[0]
        if len(chain) < 2:
            continue
        if _same_layout(out, base) and id(out) not in outputs:
            _read_base(graph, out, base)
            graph.nodes = [m for m in graph.nodes if not any(m is c for c in chain)]
            graph.relink()
            removed += len(chain)
            continue
        lib = Library(aten.as_strided.default, (base, list(out.shape), list(out.stride)), {},
                      outputs=[out])
        lib.slots, lib.const, lib.view = [out], None, None
        out.producer = lib
        graph.nodes[next(i for i, m in enumerate(graph.nodes) if m is n)] = lib
        graph.nodes = [m for m in graph.nodes if not any(m is c for c in chain[1:])]
        graph.relink()
        removed += len(chain) - 1
    return removed


def _same_layout(out: Value, base: Value) -> bool:
    return base.stride is not None and out.dtype == base.dtype and \
        list(out.shape) == list(base.shape) and list(out.stride) == list(base.stride)


def _read_base(graph: ir.Graph, out: Value, base: Value) -> None:
    """Makes every reader of `out` (library ops) read `base` instead."""
    def sub(a):
        if a is out:
            return base
        if isinstance(a, list):
            return [sub(x) for x in a]
        if isinstance(a, tuple):
            return tuple(sub(x) for x in a)
        return a

    for u in list(out.users):
        u.args = sub(u.args)
        u.kwargs = {k: sub(v) for k, v in u.kwargs.items()}
        if u.view is not None and u.view[0] is out:
            u.view = (base,) + tuple(u.view[1:])
