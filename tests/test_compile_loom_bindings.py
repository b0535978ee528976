"""Each binding a program calls a library op through (compiler/bindings.py)
runs exactly the overload it stands for, with the arguments a graph's node
passes, and gives the overload's results."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_loom.compiler.bindings import BINDINGS, binding

aten = torch.ops.aten


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _t(*shape):
    return torch.randn(*shape).to("loom")


def _calls():
    """(overload, args, kwargs) as a graph's nodes pass them."""
    x3, w, b = _t(1, 1, 16), _t(24, 16), _t(24)
    x2, m = _t(4, 16), _t(16, 8)
    q = _t(1, 2, 3, 8)
    return [
        (aten.view.default, (x3, [1, 16]), {}),
        (aten.permute.default, (w, [1, 0]), {}),
        (aten.t.default, (w,), {}),
        (aten.transpose.int, (q, 1, 2), {}),
        (aten.unsqueeze.default, (b, 0), {}),
        (aten.squeeze.dim, (x3, 1), {}),
        (aten.squeeze.dims, (x3, [0, 1]), {}),
        (aten.select.int, (q, 2, 1), {}),
        (aten.expand.default, (_t(1, 16), [4, 16]), {}),
        (aten.as_strided.default, (w, [4, 4], [16, 1], 2), {}),
        (aten.split_with_sizes.default, (_t(1, 1, 48), [16, 16, 16], 2), {}),
        (aten.clone.default, (w,), {"memory_format": torch.contiguous_format}),
        (aten.mm.default, (x2, m), {}),
        (aten.addmm.default, (b, x2, w.t()), {}),
        (aten.addmm.default, (b, x2, w.t()), {"beta": 0.5, "alpha": 2.0}),
        (aten.bmm.default, (_t(2, 3, 4), _t(2, 4, 5)), {}),
        (aten.baddbmm.default, (_t(2, 3, 5), _t(2, 3, 4), _t(2, 4, 5)), {}),
        (aten.mv.default, (w, _t(16)), {}),
        (aten.addmv.default, (b, w, _t(16)), {}),
        (aten.linear.default, (x3, w, b), {}),
        (aten.linear.default, (x2, w, b), {}),
        (aten.native_layer_norm.default, (x3, [16], _t(16), _t(16), 1e-5), {}),
        (aten.embedding.default, (w, torch.tensor([[3, 1]]).to("loom")), {}),
        (aten.index_copy_.default, (_t(6, 4), 0, torch.tensor([2]).to("loom"), _t(1, 4)), {}),
        (aten._softmax.default, (x2, 1, False), {}),
        (aten._log_softmax.default, (x2, 1, False), {}),
    ]


def _clone_args(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def test_every_binding_is_exercised():
    assert {op for op, _, _ in _calls()} == set(BINDINGS)


@pytest.mark.parametrize("op,args,kwargs", _calls(), ids=lambda v: str(v)[:40])
def test_binding_runs_its_overload_with_its_results(op, args, kwargs):
    fast = binding(op, kwargs)
    assert fast is BINDINGS[op]
    mode, builtin_mode = _Record(), _Record()
    fast_args = _clone_args(args)
    with mode:
        got = fast(*fast_args, **kwargs)
    want_args = _clone_args(args)
    with builtin_mode:
        want = op(*want_args, **kwargs)
    assert mode.ops == builtin_mode.ops  # the same ops reach the device, in order
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        assert mode.ops[0] is op, mode.ops  # the overload itself, first
    for g, w in zip(_flat(got), _flat(want)):
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype
        assert torch.equal(g.cpu(), w.cpu())
    for g, w in zip(fast_args, want_args):  # in-place ops wrote the same
        if isinstance(g, torch.Tensor):
            assert torch.equal(g.cpu(), w.cpu())


def test_an_op_without_binding_or_given_self_by_keyword_uses_its_builtin():
    assert binding(aten.index_put.default) is aten.index_put.default._op
    assert binding(aten.view.default, {"self": None}) is aten.view.default._op
