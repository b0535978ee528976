"""The Python bindings a program calls library ops through.

An ``OpOverload``'s builtin parses its arguments against the schema in a
generic way; the functions of ``torch`` and the methods of ``Tensor`` have
generated parsers that are several times faster (3-4 us against about
1 us for a view on loom). A decode step of a small model makes about a
hundred such calls (views, transposed weights, products, norms), where that
difference is a sizeable part of the step. Each binding here dispatches to
exactly the overload it stands for, given the arguments the graph's node
has (tests/test_compile_loom_bindings.py checks each one); an op not listed
is called through its overload's builtin.

The bindings name their first argument ``input`` (``self`` for methods)
where the schema says ``self``: a node passing ``self`` by keyword keeps the
builtin. ``index_put`` is not listed: its binding refuses the None entries
of an index list (``x[:, :, pos]``).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
_F = torch._C._VariableFunctions
_T = torch._C.TensorBase

#: OpOverload -> the binding that runs it.
BINDINGS = {
    aten.view.default: _T.view,
    aten.permute.default: _F.permute,
    aten.t.default: _F.t,
    aten.transpose.int: _F.transpose,
    aten.unsqueeze.default: _F.unsqueeze,
    aten.squeeze.dim: _F.squeeze,
    aten.squeeze.dims: _F.squeeze,
    aten.select.int: _F.select,
    aten.expand.default: _T.expand,
    aten.as_strided.default: _F.as_strided,
    aten.split_with_sizes.default: _F.split_with_sizes,
    aten.clone.default: _F.clone,
    aten.mm.default: _F.mm,
    aten.addmm.default: _F.addmm,
    aten.bmm.default: _F.bmm,
    aten.baddbmm.default: _F.baddbmm,
    aten.mv.default: _F.mv,
    aten.addmv.default: _F.addmv,
    aten.linear.default: torch._C._nn.linear,
    aten.native_layer_norm.default: _F.native_layer_norm,
    aten.embedding.default: _F.embedding,
    aten.index_copy_.default: _T.index_copy_,
    aten._softmax.default: _F._softmax,
    aten._log_softmax.default: _F._log_softmax,
}


def binding(op, kwargs=()):
    """The callable a program uses for ``op`` called with keyword
    arguments named ``kwargs``: its binding, else the op's builtin."""
    fast = BINDINGS.get(op)
    if fast is not None and "self" not in kwargs:
        return fast
    return getattr(op, "_op", op) if isinstance(op, torch._ops.OpOverload) else op
