"""Batch norm in loom graphs under Inductor: the library's kernels, with the
ReLU after it (forward) and the ReLU's gradient before its backward taken
into the same call.

Batch norm in training mode stays whole on loom (``library_ops.py``): its
statistics reduce over every dim but the channels, which Inductor's
generated kernels walk a vector of channels at a time, one chunk per 16
channels, across the whole activation (a channels-last ResNet step's batch
norms took about twice the time of the library's ``norm.batch_nhwc_*``
kernels, which eager runs). A post-grad pass, applied to graphs with loom
inputs only (``patches.py``), then rewrites

- ``relu(bn(x)[0])`` and ``relu(bn(x)[0] + r)`` (the end of a residual
  block) into ``loom::batch_norm_relu``, which normalizes, adds and clamps
  each row while it is in cache;
- ``native_batch_norm_backward(threshold_backward(dy, y, 0), ...)`` (or
  Inductor's decomposition of the threshold, ``where(y <= 0, 0, dy)``) into
  ``loom::batch_norm_relu_backward``, which masks dy as it sums it (and
  writes the masked gradient only where something else reads it: a
  residual block's shortcut).

Both calls give the bits of the unfused library ops
(csrc/ops/nn/nn_batch_norm_act.cpp), which are eager's. Float32 loom
tensors of at least 2 dims, contiguous or channels last, with concrete
sizes; anything else keeps the unfused ops. The fake (shape) functions of
the two ops, which Inductor needs to call them as extern kernels, are
registered here.
"""

from __future__ import annotations

import operator

import torch
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from .epilogue import relu_gradient

aten = torch.ops.aten


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _channels_last(t) -> bool:
    """The library's test for its channels-last path (nhwc_input in
    csrc/ops/nn/nn_batch_norm_nhwc.h): the output is laid out like it."""
    return t.dim() == 4 and t.numel() > 0 and t.size(1) > 0 and \
        t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def _like(t):
    fmt = torch.channels_last if _channels_last(t) else torch.contiguous_format
    return torch.empty(t.shape, dtype=t.dtype, device=t.device, memory_format=fmt)


def _fake_forward(input, weight, bias, running_mean, running_var, residual, momentum, eps):
    c = input.size(1)
    return (_like(input), *(input.new_empty((c,)) for _ in range(4)))


def _fake_backward(grad_out, output, input, weight, save_mean, save_invstd, keep_masked=False):
    c = input.size(1)
    out = [_like(input), input.new_empty((c,)), input.new_empty((c,))]
    return out + [_like(input)] if keep_masked else out


def register_fakes() -> None:
    """The ops' fake functions (once; none where C++ registered a Meta one)."""
    for name, fake in (("loom::batch_norm_relu", _fake_forward),
                       ("loom::batch_norm_relu_backward", _fake_backward)):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"):
            continue
        op = torch._library.simple_registry.singleton.find(name)
        if op.fake_impl.kernel is None:
            torch.library.register_fake(name, fake)


def _dense(t, like=None) -> bool:
    """A float32 loom tensor of >= 2 dims with concrete sizes, contiguous or
    channels last (in `like`'s shape and layout when given)."""
    if not (isinstance(t, torch.Tensor) and t.device.type == "loom" and
            t.dtype == torch.float32 and t.dim() >= 2 and t.numel() > 0 and
            all(isinstance(s, int) for s in t.shape)):
        return False
    if not (t.is_contiguous() or (t.dim() == 4 and
                                  t.is_contiguous(memory_format=torch.channels_last))):
        return False
    return like is None or (t.shape == like.shape and t.stride() == like.stride())


def _channel(t, c) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "loom" and \
        t.dtype == torch.float32 and tuple(t.shape) == (c,)


def _call(n, target) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is target


def _outputs(node) -> dict:
    """{index: getitem node} of a multi-output node, or None if something
    reads it otherwise."""
    items = {}
    for u in node.users:
        if not (_call(u, operator.getitem) and isinstance(u.args[1], int)):
            return None
        if u.args[1] in items:
            return None
        items[u.args[1]] = u
    return items


def _read_after(items, order, at) -> bool:
    """Whether every reader of the getitem nodes `items` comes after `at`."""
    return all(order[u] > order[at] for g in items.values() for u in g.users)


def _forward(graph, node, order) -> bool:
    """relu(bn(x)[0]) or relu(bn(x)[0] + r) from `node` -> one call."""
    if not (_call(node, aten._native_batch_norm_legit_functional.default) and
            len(node.args) == 8 and not node.kwargs):
        return False
    x, w, b, rm, rv, training, momentum, eps = node.args
    vx = _val(x)
    if training is not True or not _dense(vx):
        return False
    c = vx.shape[1]
    if not all(p is None or _channel(_val(p), c) for p in (w, b)) or \
            not _channel(_val(rm), c) or not _channel(_val(rv), c):
        return False
    items = _outputs(node)
    if items is None or 0 not in items or len(items[0].users) != 1:
        return False
    out = items[0]
    u = next(iter(out.users))
    residual, members = None, [u]
    if _call(u, aten.add.Tensor) and len(u.args) == 2 and not u.kwargs:
        others = [a for a in u.args if a is not out]
        if len(others) != 1 or not _dense(_val(others[0]), vx) or len(u.users) != 1:
            return False
        residual = others[0]
        u = next(iter(u.users))
        members.append(u)
    if not (_call(u, aten.relu.default) and len(u.args) == 1 and not u.kwargs and
            u.args[0] is (members[0] if residual is not None else out)):
        return False
    if not _dense(_val(u), vx) or not _dense(_val(out), vx):
        return False
    # the call goes where its last input is ready; the batch norm's other
    # outputs are read after it
    at = max([node] + ([residual] if isinstance(residual, torch.fx.Node) else []),
             key=order.__getitem__)
    rest = {i: g for i, g in items.items() if i != 0}
    if not _read_after(rest, order, at):
        return False
    op = torch.ops.loom.batch_norm_relu.default
    with graph.inserting_after(at):
        fused = graph.call_function(op, (x, w, b, rm, rv, residual, float(momentum), float(eps)))
    fused.meta["val"] = _fake_forward(vx, None, None, None, None, None, momentum, eps)
    _getitems(graph, fused, {0: u, **rest})
    for n in reversed(members):
        graph.erase_node(n)
    for g in rest.values():
        graph.erase_node(g)
    graph.erase_node(out)
    graph.erase_node(node)
    return True


def _getitems(graph, fused, targets):
    """Replaces each node in `targets` ({index: node}) with fused[index]."""
    vals = fused.meta["val"]
    last = fused
    for i, n in sorted(targets.items()):
        with graph.inserting_after(last):
            g = graph.call_function(operator.getitem, (fused, i))
        g.meta["val"] = vals[i]
        n.replace_all_uses_with(g)
        last = g


def _backward(graph, node, order) -> bool:
    """native_batch_norm_backward(threshold_backward(dy, y, 0), ...) -> one call."""
    if not (_call(node, aten.native_batch_norm_backward.default) and
            len(node.args) == 10 and not node.kwargs):
        return False
    gm, x, w, rm, rv, sm, si, train, eps, mask = node.args
    vx = _val(x)
    if train is not True or list(mask) != [True, True, True] or not _dense(vx):
        return False
    c = vx.shape[1]
    if not all(_channel(_val(t), c) for t in (w, sm, si)) or not _dense(_val(gm), vx):
        return False
    found = relu_gradient(gm) if isinstance(gm, torch.fx.Node) else None
    if found is None:
        return False
    dy, y, parts = found
    if not _dense(_val(dy), vx) or not _dense(_val(y), vx):
        return False
    items = _outputs(node)
    if items is None:
        return False
    others = [u for u in gm.users if u is not node]
    keep = bool(others)
    at = max([gm, x, w, sm, si], key=order.__getitem__)
    if any(order[u] <= order[at] for u in others):
        return False
    op = torch.ops.loom.batch_norm_relu_backward.default
    with graph.inserting_after(at):
        fused = graph.call_function(op, (dy, y, x, w, sm, si, keep))
    fused.meta["val"] = _fake_backward(None, None, vx, None, None, None, keep)
    targets = dict(items)
    if keep:
        targets[3] = gm
    _getitems(graph, fused, targets)
    for g in items.values():
        graph.erase_node(g)
    graph.erase_node(node)
    if not keep:
        graph.erase_node(gm)
        for p in parts:  # the decomposition's mask and zero, if now unread
            if not p.users:
                graph.erase_node(p)
    return True


def fuse(graph: torch.fx.Graph) -> int:
    """Rewrites the graph's batch norms with their ReLUs into library calls;
    returns how many."""
    done, order = 0, None
    for node in list(graph.nodes):
        if order is None:  # the nodes' positions, again after each rewrite
            order = {n: i for i, n in enumerate(graph.nodes)}
        if node not in order:
            continue
        if _forward(graph, node, order) or _backward(graph, node, order):
            done += 1
            order = None
    if done:
        graph.lint()
    return done


class BatchNormReluPass(CustomGraphPass):
    """The post-grad pass, with a uuid for Inductor's cache key."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        from . import config

        if not config.batch_norm_relu:
            return
        counters["inductor"]["loom_batch_norm_relu"] += fuse(graph)

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


PASS = BatchNormReluPass()
