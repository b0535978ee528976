"""A tile kernel launch as a PyTorch operator: one node under
torch.compile (Inductor and backend="loom" both keep a custom op whole),
differentiable through ``register_autograd``, checked by
``torch.library.opcheck``."""

from __future__ import annotations

import functools

import torch


def kernel_op(name, *, fake, backward=None, setup_context=None, mutates_args=(), schema=None):
    """Decorates a Python function that launches tile kernels (its type
    annotations are the operator's schema, as for
    ``torch.library.custom_op``) and returns the operator.

    ``fake(*args)`` returns outputs of the right shape, dtype and device
    without computing (``torch.empty_like`` ...); ``backward(ctx, *grads)``
    and ``setup_context(ctx, inputs, output)`` make it differentiable (see
    ``torch.library.register_autograd``)."""
    if "::" not in name:
        raise ValueError(f"torch_loom.tile.kernel_op: name must be 'namespace::op', got {name!r}")
    if not callable(fake):
        raise TypeError("torch_loom.tile.kernel_op: fake must be a function")
    if (backward is None) != (setup_context is None) and backward is None:
        raise ValueError("torch_loom.tile.kernel_op: setup_context without backward")

    def wrap(fn):
        op = torch.library.custom_op(name, mutates_args=mutates_args, schema=schema)(fn)
        op.register_fake(fake)
        if backward is not None:
            op.register_autograd(backward, setup_context=setup_context)
        return KernelOp(op, fn)

    return wrap


class KernelOp:
    """The operator (attributes and methods are the custom op's): a call
    from plain eager code -- no autograd to record, no compile, mode or
    functorch transform, plain tensors -- runs the launching function
    directly, as the operator's dispatch would end up doing, without the
    dispatcher's Python cost (tens of microseconds a call)."""

    def __init__(self, op, fn):
        self._op, self._fn = op, fn
        functools.update_wrapper(self, fn)

    def __getattr__(self, name):
        return getattr(self._op, name)

    def __call__(self, *args, **kwargs):
        if _plain_eager(args, kwargs):
            return self._fn(*args, **kwargs)
        return self._op(*args, **kwargs)


_is_compiling = torch.compiler.is_compiling
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch = torch._C._are_functorch_transforms_active
_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def _plain_eager(args, kwargs):
    # called on every launch from eager code: the functions are bound once
    if _is_compiling() or _function_mode() or _dispatch_modes() or _functorch():
        return False
    grad = _grad_enabled()
    for a in args:
        if isinstance(a, _Tensor) and (type(a) is not _Tensor or (grad and a.requires_grad)):
            return False
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, _Tensor) and (type(a) is not _Tensor or (grad and a.requires_grad)):
                return False
    return True
