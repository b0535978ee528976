"""Ops that loom graphs keep whole: calls into loom's kernel library
instead of Inductor's generated C++.

Inductor decomposes these ops into primitives and generates C++ for them.
On loom the library's kernels are faster: GELU and its gradient evaluate
erf/exp with the library's own vectorized math (Inductor's ``Vectorized``
erf costs about 1.6x as much per element); cross-entropy's
``log_softmax``/``nll_loss`` pair is one pass per row in the library, and
the mean of the loss is a reduction to one element that a generated kernel
runs as one chunk; the embedding gradient's generated code sums rows with
"atomic_add" stores, run as one chunk in iteration order (cpp_kernels.py),
where the library's kernel is parallel and deterministic.

For each op in ``LIBRARY_OPS``, Inductor's decomposition declines to
decompose it when its tensors are on loom (returns ``NotImplemented``, as
Inductor's own device-specific decompositions do), and its lowering makes it
an extern kernel call (a ``FallbackKernel``: the aten op, which dispatches to
loom's native kernel) for loom graphs. Graphs on other devices see the
original decomposition and lowering.

``aten.cat`` on loom is lowered as on the CPU (Inductor's C++ backend): into
a ``ConcatKernel``, whose inputs are written straight into slices of the
output by vectorized copy kernels, never as one "pointwise cat" kernel whose
per-element selects between inputs the C++ backend cannot vectorize.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

aten = torch.ops.aten

#: The ops loom graphs keep whole, as calls into the library.
LIBRARY_OPS = {
    aten.gelu.default,
    aten.gelu_backward.default,
    aten._log_softmax.default,
    aten._log_softmax_backward_data.default,
    aten.nll_loss_forward.default,
    aten.nll_loss_backward.default,
    aten.embedding_dense_backward.default,
}

_LOOM = "loom"


def _tensor_on_loom(args, kwargs) -> bool:
    """Whether a tensor argument (a fake tensor while AOTAutograd traces) is
    on loom."""
    for a in pytree.tree_leaves((args, kwargs)):
        if isinstance(a, torch.Tensor) and a.device.type == _LOOM:
            return True
    return False


def _node_on_loom(args, kwargs) -> bool:
    """Whether an IR node argument of a lowering is on loom."""
    from torch._inductor import ir

    for a in pytree.tree_leaves((args, kwargs)):
        if isinstance(a, ir.IRNode):
            device = a.get_device()
            if device is not None and device.type == _LOOM:
                return True
    return False


def _keep_whole_on_loom(op, decompose):
    def decomposition(*args, **kwargs):
        if op in LIBRARY_OPS and _tensor_on_loom(args, kwargs):
            return NotImplemented
        return decompose(*args, **kwargs)

    decomposition._loom = True
    decomposition.__wrapped__ = decompose
    return decomposition


def _extern_on_loom(op, original):
    """op's lowering: the aten op as an extern kernel for loom graphs,
    `original` (if any) for others."""
    from torch._inductor.lowering import fallback_handler

    extern = fallback_handler(op, add_to_fallback_set=False)

    def lowering(*args, **kwargs):
        if original is None or (op in LIBRARY_OPS and _node_on_loom(args, kwargs)):
            return extern(*args, **kwargs)
        return original(*args, **kwargs)

    lowering._loom = True
    lowering.__wrapped__ = original
    return lowering


def _cat_as_on_cpu(original):
    from torch._inductor import config

    def cat(*args, **kwargs):
        if not _node_on_loom(args, kwargs):
            return original(*args, **kwargs)
        # Inductor lowers a CPU cat to a ConcatKernel by device type; with no
        # inputs allowed in a pointwise cat, a loom cat ends the same way.
        with config.patch(max_pointwise_cat_inputs=0, max_complex_pointwise_cat_inputs=0):
            return original(*args, **kwargs)

    cat._loom = True
    cat.__wrapped__ = original
    return cat


def apply() -> None:
    """Installs the device checks in Inductor's decomposition table and
    lowerings (once)."""
    from torch._inductor.decomposition import decompositions
    from torch._inductor.lowering import lowerings

    for op in LIBRARY_OPS:
        decompose = decompositions.get(op)
        if decompose is not None and not getattr(decompose, "_loom", False):
            decompositions[op] = _keep_whole_on_loom(op, decompose)
        lowering = lowerings.get(op)
        if not getattr(lowering, "_loom", False):
            lowerings[op] = _extern_on_loom(op, lowering)
    cat = lowerings[aten.cat.default]
    if not getattr(cat, "_loom", False):
        lowerings[aten.cat.default] = _cat_as_on_cpu(cat)
