"""The layouts of loom's convolutions as fake tensors see them.

Tracing (Dynamo, AOTAutograd, Inductor) computes each op's output on fake
tensors. PyTorch's fake convolution lays its outputs out as the backend it
would select for the device: for a PrivateUse1 device that is the
"Overrideable" backend, whose outputs are contiguous. loom's convolution
(csrc/ops/conv/conv.cpp, ``conv_memory_format``) lays them out as the CPU
does: the memory format of the backend the CPU would select for tensors of
those sizes and strides (channels last when the input or the weight is, for
4-d convolutions). Inductor checks extern kernels' outputs against the fake
strides (``assert_size_stride``) and indexes them by those strides, so a
channels-last model compiled for loom failed at its first convolution.

``apply()`` wraps PyTorch's fake rule for the convolution ops: for loom
tensors the forward's output, and the backward's input and weight
gradients, get the format the CPU's backend selection gives for CPU tensors
of the same sizes, strides and dtype (the bias gradient stays as it is).
Other devices keep PyTorch's rule, and so do symbolic sizes (no format is
decided there, as in PyTorch's rule).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

#: The ops PyTorch's fake convolution rule serves.
CONV_OPS = (
    aten.convolution.default,
    aten._convolution.default,
    aten._convolution.deprecated,
    aten.convolution_backward.default,
)

_LOOM = "loom"


def _like_on_cpu(t: torch.Tensor) -> torch.Tensor:
    """A fake CPU tensor of t's sizes, strides and dtype (call in fake mode)."""
    r = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    return r.requires_grad_(t.requires_grad) if t.dtype.is_floating_point else r


def memory_format(fake_mode, kwargs: dict) -> torch.memory_format | None:
    """The layout loom gives a convolution's outputs (the CPU's rule), for the
    op's normalized arguments; None where the sizes are symbolic."""
    from torch.fx.experimental.symbolic_shapes import has_guarding_hint

    input_, weight = kwargs["input"], kwargs["weight"]
    if not all(has_guarding_hint(s) for s in (*input_.shape, *weight.shape)):
        return None
    if input_.dim() not in (4, 5) or input_.dim() != weight.dim():
        return torch.contiguous_format
    with fake_mode:
        ci, cw = _like_on_cpu(input_), _like_on_cpu(weight)
        select = {name: kwargs[name] for name in ("stride", "padding", "dilation", "transposed",
                                                  "output_padding", "groups")}
        # loom's forward passes its bias's sizes, its backward none.
        bias = kwargs.get("bias")
        bias_sizes = list(bias.shape) if bias is not None else None
        backend = torch._C._select_conv_backend(ci, cw, None, bias_sizes=bias_sizes, **select)
        return torch._C._conv_determine_backend_memory_format(ci, cw, backend)


def _in_format(fake_mode, t, fmt):
    if t is None:
        return None
    with fake_mode:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device, memory_format=fmt)


def _on_loom(original):
    from torch._subclasses.fake_impls import _normalize_function_or_error

    def conv(fake_mode, func, *args, **kwargs):
        out = original(fake_mode, func, *args, **kwargs)
        _, normalized = _normalize_function_or_error(func, args=args, kwargs=kwargs,
                                                     normalize_to_only_use_kwargs=True)
        if normalized["input"].fake_device.type != _LOOM:
            return out
        fmt = memory_format(fake_mode, normalized)
        if fmt is None:
            return out
        if func is aten.convolution_backward.default:
            grad_input, grad_weight, grad_bias = out
            return (_in_format(fake_mode, grad_input, fmt),
                    _in_format(fake_mode, grad_weight, fmt), grad_bias)
        return _in_format(fake_mode, out, fmt)

    conv._loom = True
    conv.__wrapped__ = original
    return conv


def apply() -> None:
    """Wraps PyTorch's fake convolution rule for loom tensors (once)."""
    import torch._subclasses.fake_impls as fake_impls

    table = fake_impls.op_implementations_dict
    for op in CONV_OPS:
        original = table.get(op)
        if original is not None and not getattr(original, "_loom", False):
            table[op] = _on_loom(original)
