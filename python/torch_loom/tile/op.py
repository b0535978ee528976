"""A tile kernel launch as a PyTorch operator: one node under
torch.compile (Inductor and backend="loom" both keep a custom op whole),
differentiable through ``register_autograd``, checked by
``torch.library.opcheck``."""

from __future__ import annotations

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
        return op

    return wrap
