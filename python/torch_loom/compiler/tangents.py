"""Gradients of outputs the loss does not use.

A compiled training graph returns several outputs (a model's logits and
its loss); the caller backpropagates some of them. Autograd then has no
gradient for the others, and by default an autograd Function receives a
materialized zero tensor in their place: the backward graph adds it
(``d_logits = tangent + softmax_backward(...)``), a fill and an add over the
whole output that eager, which never sees a gradient there, does not run.

Outputs of loom's compiled functions therefore ask autograd not to
materialize them (:func:`no_zero_gradients`, set on the function's node
after each forward call); the backward receives None for such a tangent,
and :class:`Tangents` runs a variant of the backward graph in which that
tangent is known to be zero: values linear in it (its views, products,
quotients, negations, sums and matrix products) are zero too, and a sum
with a zero operand is its other operand. The variant is built once per
set of missing tangents. When a zero cannot be eliminated (an output is
zero, or an op outside those consumes it) the variant passes zeros to the
graph as autograd would have: results never change, only work goes.
"""

from __future__ import annotations

import weakref

import torch
import torch.fx

aten = torch.ops.aten

# Ops whose result is zero when their first operand is (views and linear maps).
_ZERO_OF_FIRST = {aten.view, aten._unsafe_view, aten.reshape, aten.permute, aten.expand,
                  aten.t, aten.transpose, aten.unsqueeze, aten.squeeze, aten.alias,
                  aten.clone, aten.detach, aten.neg, aten.div, aten.sum, aten.slice,
                  aten.select}
# Ops whose result is zero when any tensor operand is (products).
_ZERO_OF_ANY = {aten.mul, aten.mm, aten.bmm}


def _packet(node):
    target = node.target
    return getattr(target, "overloadpacket", target)


def _val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _same_layout(a, b) -> bool:
    va, vb = _val(a), _val(b)
    return (va is not None and vb is not None and va.shape == vb.shape and va.dtype == vb.dtype
            and va.device == vb.device and va.stride() == vb.stride())


def tangent_positions(gm: torch.fx.GraphModule) -> list[int]:
    """Indices of the backward graph's inputs that are output gradients."""
    return [i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
            if str(n.target).startswith("tangents")]


def without_tangents(gm: torch.fx.GraphModule, missing) -> torch.fx.GraphModule | None:
    """A copy of backward graph ``gm`` in which the placeholders at
    ``missing`` are zero and eliminated; None when some zero would have to
    be materialized."""
    graph = torch.fx.Graph()
    env = {}
    graph.output(graph.graph_copy(gm.graph, env))
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    zero = {placeholders[i] for i in missing}
    replace = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        args = node.args
        operands = [a for a in node.all_input_nodes]
        if not any(a in zero for a in operands):
            continue
        packet = _packet(node)
        if packet in _ZERO_OF_FIRST and args and args[0] in zero and not any(
                a in zero for a in operands if a is not args[0]) or packet in _ZERO_OF_ANY:
            zero.add(node)
            continue
        if packet in (aten.add, aten.sub) and len(args) == 2:
            a, b = args
            alpha = node.kwargs.get("alpha", 1)
            if a in zero and b in zero:
                zero.add(node)
                continue
            if b in zero and isinstance(a, torch.fx.Node) and _same_layout(node, a):
                replace[node] = a
                continue
            if (a in zero and packet is aten.add and alpha == 1 and isinstance(b, torch.fx.Node)
                    and _same_layout(node, b)):
                replace[node] = b
                continue
        return None  # a zero some op must read
    for node, by in replace.items():
        while by in replace:
            by = replace[by]
        node.replace_all_uses_with(by)
    for node in graph.nodes:
        if node.op == "output":
            outs = node.args[0]
            flat = outs if isinstance(outs, (list, tuple)) else [outs]
            if any(o in zero for o in flat):
                return None
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and not node.users and (node in zero or node in replace):
            graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


class Tangents:
    """A backward graph's compiled callable, boxed, that accepts None for
    output gradients autograd did not materialize (see module doc)."""

    _boxed_call = True

    def __init__(self, gm, compiled, compile_fn):
        self.gm = gm
        self.compiled = compiled
        self._compile = compile_fn
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.positions = tangent_positions(gm)
        self.variants = {}
        self.calls_without = 0

    def __call__(self, args):
        missing = tuple(i for i in self.positions if args[i] is None)
        if not missing:
            return self.compiled(args)
        variant = self.variants.get(missing)
        if variant is None:
            variant = self.variants[missing] = self._variant(missing)
        self.calls_without += 1
        return variant(args)

    def _variant(self, missing):
        from . import observe

        reduced = without_tangents(self.gm, missing)
        if reduced is not None:
            observe.record_zero_tangents(len(missing), eliminated=True)
            return self._compile(reduced)
        observe.record_zero_tangents(len(missing), eliminated=False)
        metas = {i: _val(n) for i, n in enumerate(
            n for n in self.gm.graph.nodes if n.op == "placeholder")}
        compiled = self.compiled

        def materialized(args):
            for i in missing:
                m = metas[i]
                args[i] = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype,
                                              device=m.device).zero_()
            return compiled(args)

        return materialized


_ours = weakref.WeakKeyDictionary()  # autograd node type -> made by a loom forward


def _is_loom_function(fn_type) -> bool:
    known = _ours.get(fn_type)
    if known is None:
        cls = getattr(fn_type, "_forward_cls", None)
        known = _ours[fn_type] = bool(getattr(getattr(cls, "compiled_fw", None),
                                              "_loom_forward", False))
    return known


def no_zero_gradients(compiled):
    """Wraps Dynamo's compiled callable: the autograd node of each output
    a loom forward made gets no materialized zero gradients."""

    def run(*args):
        outs = compiled(*args)
        for o in outs if isinstance(outs, (list, tuple)) else (outs,):
            fn = getattr(o, "grad_fn", None) if isinstance(o, torch.Tensor) else None
            if fn is not None and _is_loom_function(type(fn)):
                fn.set_materialize_grads(False)
        return outs

    return torch._dynamo.disable(run, reason="loom: the call of a compiled graph")
