"""GEMM epilogues in loom graphs under Inductor: a linear layer's ReLU, and
ReLU's backward after the gradient's matrix product, run inside the GEMM.

A post-grad pass, applied to graphs with loom inputs only (``patches.py``
adds it to ``compile_fx``'s config patches, beside any pass the user set),
rewrites

- ``relu(addmm(bias, x, w))`` and ``relu(mm(x, w))`` (the forward), and
- ``threshold_backward(mm(g, w), relu_out, 0)`` (the backward's gradient at
  a ReLU's input), and its decomposed form
  ``where(le(relu_out, 0), 0, mm(g, w))``,

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

import torch
from torch._dynamo.utils import counters
from torch._guards import detect_fake_mode
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def _words() -> tuple[int, int, int]:
    """(RELU, THRESHOLD_BACKWARD, operand shift) of the kernel contract."""
    from ..compiler.epilogue import OPERAND_SHIFT, pw_ops

    table = pw_ops()
    return table["relu"], table["threshold_backward"], OPERAND_SHIFT


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
    """(product node, step word, operands) of an epilogue ending at node."""
    relu, threshold_backward, shift = _words()
    if node.op != "call_function":
        return None
    if node.target is aten.relu.default and len(node.args) == 1 and not node.kwargs:
        return node.args[0], relu, []
    grad = result = None
    if node.target is aten.threshold_backward.default and len(node.args) == 3 and \
            not node.kwargs and node.args[2] == 0:
        grad, result = node.args[0], node.args[1]
    elif node.target is aten.where.self and len(node.args) == 3 and not node.kwargs:
        # Inductor's decomposition of threshold_backward(grad, result, 0)
        cond, zero, grad = node.args
        if _call(cond, aten.le.Scalar) and len(cond.args) == 2 and cond.args[1] == 0 and \
                _call(zero, aten.full.default) and list(zero.args[0]) == [] and \
                zero.args[1] == 0:
            result = cond.args[0]
    vr, vg = _val(result), _val(grad)
    if _plain(vr) and _plain(vg) and vr.shape == vg.shape:
        return grad, threshold_backward | 1 << shift, [result]
    return None


def _call(n, target) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is target


def fuse(graph: torch.fx.Graph) -> int:
    """Rewrites the graph's ReLU epilogues into mm_epilogue calls; returns
    how many."""
    op = torch.ops.loom.mm_epilogue.default
    done = 0
    for node in list(graph.nodes):
        found = _match(node)
        if found is None:
            continue
        prod, word, operands = found
        parts = _product(prod)
        out = _val(node)
        if parts is None or not _plain(out) or out.dtype != _val(prod).dtype or \
                out.shape != _val(prod).shape:
            continue
        a, b, bias = parts
        keep = len(prod.users) > 1
        tail = ([word], operands, out.dtype, keep, list(out.shape))
        fake_mode = detect_fake_mode([out])
        with fake_mode:
            vals = op(_val(a), _val(b), _val(bias), [word], [_val(o) for o in operands],
                      *tail[2:])
        with graph.inserting_before(node):
            fused = graph.call_function(op, (a, b, bias, *tail))
            fused.meta["val"] = vals
            value = graph.call_function(operator.getitem, (fused, 1 if keep else 0))
            value.meta["val"] = fused.meta["val"][1 if keep else 0]
            if keep:
                product = graph.call_function(operator.getitem, (fused, 0))
                product.meta["val"] = fused.meta["val"][0]
        node.replace_all_uses_with(value)
        inputs = node.all_input_nodes
        graph.erase_node(node)
        for n in inputs:  # the decomposition's mask and zero, if now unread
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
        counters["inductor"]["loom_gemm_epilogue"] += fuse(graph)

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


PASS = EpiloguePass()
