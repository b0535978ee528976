"""The decompositions AOTAutograd applies for the ``loom`` backend.

Ops with strong library kernels stay whole (the matmul family,
convolution, attention, layer and RMS norm, softmax and log-softmax,
embedding, and their backward ops), and so do the pointwise ops the
lowering spells with the library's own arithmetic (addcmul, addcdiv, lerp,
the activations' backward forms); everything else decomposes as
``core_aten_decompositions()`` has it, into the pointwise ops and
reductions the fuser handles. Batch norm stays whole too, forward and
backward: its statistics reduce over every dim but the channels of an
NCHW tensor, which the library's batch-norm kernels walk along memory
(a ResNet-style CNN's step: 0.6-1.2 ms per batch norm, against 15-45 ms
for the fused kernels' nested loops). The functional ``_foreach_*`` ops
of optimizers are decomposed beyond core ATen (into one op per tensor, so
each parameter's update fuses into one kernel). The negative
log-likelihood's backward stays whole: decomposed, it fills a zero tensor
of the log-probabilities' size, scatters the targets into it and scales it
in a third pass (a GPT's [tokens, vocab] gradient), where the library
writes it once.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

#: Overload packets kept whole: loom's library runs them.
KEEP = (
    aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.matmul, aten.addmv, aten.mv, aten.dot,
    aten.convolution, aten.convolution_backward, aten._convolution,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
    aten._scaled_dot_product_fused_attention_overrideable,
    aten._scaled_dot_product_fused_attention_overrideable_backward,
    aten.native_layer_norm, aten.native_layer_norm_backward,
    aten._fused_rms_norm, aten._fused_rms_norm_backward,
    aten._softmax, aten._softmax_backward_data, aten._log_softmax,
    aten._log_softmax_backward_data,
    aten.embedding, aten.embedding_dense_backward,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training, aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten.nll_loss_backward, aten.nll_loss2d_backward,
)

#: Overload packets the lowering turns into single ops with the library's
#: own arithmetic (a decomposition would round differently).
LOWERED = (
    aten.addcmul, aten.addcdiv, aten.lerp, aten.gelu_backward, aten.sigmoid_backward,
    aten.tanh_backward, aten.threshold_backward, aten.silu, aten.silu_backward,
)


#: The functional _foreach ops decomposed per tensor, by their base op.
FOREACH = ("add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "pow", "sqrt", "rsqrt",
           "reciprocal", "neg", "abs", "exp", "log", "sign", "clamp_min", "clamp_max",
           "maximum", "minimum", "sigmoid", "tanh")


def _per_tensor(base, trailing=None):
    """The decomposition of a functional _foreach op into `base` per
    tensor; `trailing` names the kwarg-only parameter of `base` that the
    _foreach schema passes positionally (addcmul's value)."""
    def decomposition(*args, **kwargs):
        if trailing is not None and len(args) > 3:
            args, kwargs = args[:3], dict(kwargs, **{trailing: args[3]})
        lists = [a for a in list(args) + list(kwargs.values()) if isinstance(a, (list, tuple))]
        n = len(lists[0]) if lists else 0

        def pick(a, i):
            return a[i] if isinstance(a, (list, tuple)) else a

        return [base(*[pick(a, i) for a in args], **{k: pick(v, i) for k, v in kwargs.items()})
                for i in range(n)]
    return decomposition


def _foreach_table():
    table = {}
    for name in FOREACH:
        packet = getattr(aten, f"_foreach_{name}", None)
        base = getattr(aten, name, None)
        if packet is None or base is None:
            continue
        trailing = "value" if name in ("addcmul", "addcdiv") else None
        for overload in packet.overloads():
            # (addcmul's Tensor overload carries its values in one tensor)
            if "out" in overload or (trailing and overload == "Tensor"):
                continue
            table[getattr(packet, overload)] = _per_tensor(base, trailing)
    return table


@functools.cache
def decompositions() -> dict:
    table = dict(core_aten_decompositions())
    keep = set(KEEP) | set(LOWERED)
    for op in list(table):
        if getattr(op, "overloadpacket", None) in keep:
            del table[op]
    table.update(_foreach_table())
    return table
