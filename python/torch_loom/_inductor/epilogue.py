"""GEMM epilogues in loom graphs under Inductor: a linear layer's ReLU or
GELU, and their backward after the gradient's matrix product, run inside
the GEMM. Off unless ``torch_loom._inductor.config.gemm_epilogues`` is set
(the epilogue GEMM measured slower than the plain GEMM and a generated
activation kernel together; see config.py).

A post-grad pass, applied to graphs with loom inputs only (``patches.py``
adds it to ``compile_fx``'s config patches, beside any pass the user set),
rewrites

- ``relu(addmm(bias, x, w))``, ``relu(mm(x, w))`` and ``gelu`` of either
  (the forward; GELU stays whole on loom, ``library_ops.py``),
- ``threshold_backward(mm(g, w), relu_out, 0)`` (the backward's gradient at
  a ReLU's input), its decomposed form
  ``where(le(relu_out, 0), 0, mm(g, w))``, and
  ``gelu_backward(mm(g, w), gelu_in)``,

the product possibly seen through a view that splits its rows into leading
dims (a linear layer over [batch, seq, features]),
into ``loom::mm_epilogue``, the library GEMM that applies the elementwise
step to each output tile while it is in cache
(``loom/kernels/gemm_epilogue.h``). The step runs with the pointwise
library's element function and eager's roundings, so the values are the
ones the unfused ops give, and the graph saves one pass over the
activation per layer and direction. Inductor then calls the op as an
extern kernel (its shape function is the op's Meta kernel).

Products whose result something else also reads keep it
(``keep_product``); shapes with symbolic sizes, non-loom tensors, and
addmm with ``beta``/``alpha`` other than 1 are left as they are.
"""

from __future__ import annotations

import functools
import operator
import os

import torch
from torch._dynamo.utils import counters
from torch._guards import detect_fake_mode
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


@functools.cache
def _words() -> dict:
    """The kernel contract's step words by op name, and the operand shift."""
    from ..compiler.epilogue import OPERAND_SHIFT, pw_ops

    table = pw_ops()
    names = ("relu", "gelu", "gelu_tanh", "threshold_backward", "gelu_backward",
             "gelu_tanh_backward")
    return {**{n: table[n] for n in names}, "shift": OPERAND_SHIFT}


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _plain(t) -> bool:
    """A loom float tensor with concrete sizes."""
    return (isinstance(t, torch.Tensor) and t.device.type == "loom" and t.dtype in _FLOATS and
            all(isinstance(s, int) for s in t.shape))


def _product(n):
    """(a, b, bias) of an mm/addmm node the epilogue can take, or None."""
    if not isinstance(n, torch.fx.Node) or n.op != "call_function":
        return None
    if n.target is aten.mm.default and len(n.args) == 2 and not n.kwargs:
        (a, b), bias = n.args, None
    elif n.target is aten.addmm.default and len(n.args) == 3 and \
            all(n.kwargs.get(k, 1) == 1 for k in n.kwargs) and set(n.kwargs) <= {"beta", "alpha"}:
        bias, a, b = n.args
        bv = _val(bias)
        if not _plain(bv) or bv.dim() > 2:
            return None
    else:
        return None
    va, vb, vc = _val(a), _val(b), _val(n)
    if not all(_plain(v) and v.dim() == 2 for v in (va, vb, vc)) or vc.numel() == 0:
        return None
    if not va.dtype == vb.dtype == vc.dtype or (bias is not None and _val(bias).dtype != va.dtype):
        return None
    return a, b, bias


def _match(node):
    """(value the step reads, step word, operands) of an epilogue step ending
    at node, or None."""
    w = _words()
    if node.op != "call_function":
        return None
    if node.target is aten.relu.default and len(node.args) == 1 and not node.kwargs:
        return node.args[0], w["relu"], []
    if node.target is aten.gelu.default and len(node.args) == 1 and \
            set(node.kwargs) <= {"approximate"}:
        tanh = node.kwargs.get("approximate", "none") == "tanh"
        return node.args[0], w["gelu_tanh" if tanh else "gelu"], []
    grad = saved = None
    word = w["threshold_backward"]
    found = relu_gradient(node)
    if found is not None:
        grad, saved, _ = found
    elif node.target is aten.gelu_backward.default and len(node.args) == 2 and \
            set(node.kwargs) <= {"approximate"}:
        grad, saved = node.args
        tanh = node.kwargs.get("approximate", "none") == "tanh"
        word = w["gelu_tanh_backward" if tanh else "gelu_backward"]
    vs, vg = _val(saved), _val(grad)
    if _plain(vs) and _plain(vg) and vs.shape == vg.shape:
        return grad, word | 1 << w["shift"], [saved]
    return None


def relu_gradient(node):
    """(dy, y, the decomposition's other nodes) when node is a ReLU's
    gradient at its input, threshold_backward(dy, y, 0) or Inductor's
    decomposition of it, where(le(y, 0), full([], 0), dy); else None."""
    if node.op != "call_function":
        return None
    if node.target is aten.threshold_backward.default and len(node.args) == 3 and \
            not node.kwargs and node.args[2] == 0:
        return node.args[0], node.args[1], []
    if node.target is aten.where.self and len(node.args) == 3 and not node.kwargs:
        cond, zero, grad = node.args
        if _call(cond, aten.le.Scalar) and len(cond.args) == 2 and cond.args[1] == 0 and \
                _call(zero, aten.full.default) and list(zero.args[0]) == [] and \
                zero.args[1] == 0:
            return grad, cond.args[0], [cond, zero]
    return None


def _rows_view(n):
    """The product node whose rows view n splits into leading dims, or None."""
    if not isinstance(n, torch.fx.Node) or n.op != "call_function" or \
            n.target not in _VIEWS or not isinstance(n.args[0], torch.fx.Node):
        return None
    src, vn, vs = n.args[0], _val(n), _val(n.args[0])
    if _plain(vn) and _plain(vs) and vs.dim() == 2 and vn.dim() >= 2 and \
            vn.shape[-1] == vs.shape[-1] and vn.numel() == vs.numel():
        return src
    return None


def _call(n, target) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is target


def fuse(graph: torch.fx.Graph) -> int:
    """Rewrites the graph's activation epilogues into mm_epilogue calls;
    returns how many."""
    op = torch.ops.loom.mm_epilogue.default
    done = 0
    for node in list(graph.nodes):
        found = _match(node)
        if found is None:
            continue
        src, word, operands = found
        view = src if _product(src) is None else None
        prod = _rows_view(view) if view is not None else src
        parts = _product(prod)
        out = _val(node)
        if parts is None or not _plain(out) or out.dtype != _val(prod).dtype or \
                out.shape != _val(src).shape:
            continue
        # the fused call runs once its last input exists; the product's other
        # readers must come after it
        order = {n: i for i, n in enumerate(graph.nodes)}
        at = max([prod] + [o for o in operands if isinstance(o, torch.fx.Node)],
                 key=order.__getitem__)
        others = [u for u in prod.users if u is not src and u is not node]
        if view is not None:
            others += [u for u in view.users if u is not node]
        if any(order[u] <= order[at] for u in others):
            continue
        a, b, bias = parts
        keep = bool(others)
        tail = ([word], operands, out.dtype, keep, list(out.shape))
        with detect_fake_mode([out]):
            vals = op(_val(a), _val(b), _val(bias), [word], [_val(o) for o in operands],
                      *tail[2:])
        with graph.inserting_after(at):
            fused = graph.call_function(op, (a, b, bias, *tail))
            fused.meta["val"] = vals
        with graph.inserting_after(fused):
            value = graph.call_function(operator.getitem, (fused, 1 if keep else 0))
            value.meta["val"] = vals[1 if keep else 0]
        if keep:
            with graph.inserting_after(fused):
                product = graph.call_function(operator.getitem, (fused, 0))
                product.meta["val"] = vals[0]
        node.replace_all_uses_with(value)
        inputs = node.all_input_nodes
        graph.erase_node(node)
        if view is not None and view.users:  # read by others too: of the kept product
            with graph.inserting_after(product):
                moved = graph.call_function(view.target, (product, *view.args[1:]), view.kwargs)
                moved.meta.update(view.meta)
            view.replace_all_uses_with(moved)
        for n in inputs:  # the view, the decomposition's mask and zero, if now unread
            if n is not prod and not n.users and n.op == "call_function":
                graph.erase_node(n)
        if keep:
            prod.replace_all_uses_with(product)
        graph.erase_node(prod)
        done += 1
    if done:
        graph.lint()
    return done


class EpiloguePass(CustomGraphPass):
    """The post-grad pass, with a uuid for Inductor's cache key."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        from . import config

        if not config.gemm_epilogues:
            return
        counters["inductor"]["loom_gemm_epilogue"] += fuse(graph)

    def uuid(self) -> bytes:
        # The step words the pass writes into graphs are the enum's values
        # in the kernel contract's header: a graph cached under other values
        # must not be loaded.
        from ..compiler import jit

        header = os.path.join(jit.include_dir(), "loom", "kernels", "pointwise.h")
        return get_hash_for_files((__file__, header))


PASS = EpiloguePass()
