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
where the library's kernel is parallel and deterministic. Layer norm and
its backward run as the library's row kernels, the ones eager calls:
Inductor's decomposition (mean, variance, pointwise steps, and the
gradient's row sums) generated kernels reaching about a third of the
library's throughput (16384 x 1024 float32 rows, bench ``layer_norm``),
and the generated softmax about half of the library's (bench ``softmax``,
against loom eager with its adaptive fusion off). Batch norm in training
(forward and backward) runs as the library's kernels too, which walk each
row of channels along memory; Inductor's statistics and gradient sums over
a channels-last activation read a vector of channels per chunk across all
rows (batchnorm.py then takes the ReLUs around it into the same calls).

For each op in ``LIBRARY_OPS``, Inductor's decomposition declines to
decompose it when its tensors are on loom (returns ``NotImplemented``, as
Inductor's own device-specific decompositions do), and its lowering makes it
an extern kernel call (a ``FallbackKernel``: the aten op, which dispatches to
loom's native kernel) for loom graphs. Graphs on other devices see the
original decomposition and lowering.

A sum over the leading dims of a large tensor that is already in memory
(a linear layer's bias gradient: the output gradient summed over its rows)
is a call into the library's reduction too (``_column_sum_on_loom``).
Inductor's generated kernel reads it column block by column block, one 64 B
line per row for 16 outputs with a single chain of adds, where the
library's kernel streams whole rows; and the library's sum is the one eager
autograd calls, so the gradient keeps eager's bits. So are the sum and
the mean of all the elements of a large contiguous tensor in memory
(``whole_sum_in_library``): Inductor generates a sum to one element as a
single chunk that one worker runs, where the library's sum is shared among
the workers (16M float32 elements: 34 GB/s generated, 43 GB/s the library)
and gives eager's bits. A sum whose operand
Inductor would compute on the fly (a pointwise producer fused into the
reduction) stays generated: the extern call would cost a pass writing it.

``aten.cat`` on loom is lowered as on the CPU (Inductor's C++ backend): into
a ``ConcatKernel``, whose inputs are written straight into slices of the
output by vectorized copy kernels, never as one "pointwise cat" kernel whose
per-element selects between inputs the C++ backend cannot vectorize.

Attention on loom reads its query, key and value (and, in the backward,
the output and its gradient) as [batch*heads, length, head_dim] rows, and
writes its outputs that way: a strided view (the heads of a fused qkv
projection, ``qkv.split(...).view(b, t, h, d).transpose(1, 2)``) is copied
by the op on each call, and outputs are copied again into the layout the
meta function gives (which follows the query's). Inductor's constraint for
these ops keeps the inputs' stride order, so a compiled GPT step paid
twelve such copies per layer. For loom graphs the constraint asks for
those inputs contiguous instead (``_sdpa_rows_on_loom``): Inductor writes
them with generated copy kernels (the forward's q, k and v of a layer in
one), the outputs then come out contiguous with no copy, and the backward
reads the forward's contiguous output as it is.
"""

from __future__ import annotations

import math

import torch
import torch.utils._pytree as pytree

aten = torch.ops.aten

#: The ops loom graphs keep whole, as calls into the library.
LIBRARY_OPS = {
    aten.gelu.default,
    aten.gelu_backward.default,
    aten._log_softmax.default,
    aten._log_softmax_backward_data.default,
    aten._softmax.default,
    aten._softmax_backward_data.default,
    aten.nll_loss_forward.default,
    aten.nll_loss_backward.default,
    aten.embedding_dense_backward.default,
    aten.native_layer_norm.default,
    aten.native_layer_norm_backward.default,
    aten._native_batch_norm_legit_functional.default,
    aten.native_batch_norm_backward.default,
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


#: Batch norm's ops, kept whole while config.batch_norm_library is on.
BATCH_NORM_OPS = {aten._native_batch_norm_legit_functional.default,
                  aten.native_batch_norm_backward.default}


def _in_library(op) -> bool:
    from . import config

    return op in LIBRARY_OPS and (op not in BATCH_NORM_OPS or config.batch_norm_library)


def _keep_whole_on_loom(op, decompose):
    def decomposition(*args, **kwargs):
        if _in_library(op) and _tensor_on_loom(args, kwargs):
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
        if original is None or (_in_library(op) and _node_on_loom(args, kwargs)):
            return extern(*args, **kwargs)
        return original(*args, **kwargs)

    lowering._loom = True
    lowering.__wrapped__ = original
    return lowering


#: The fewest elements of an operand whose column sums go to the library:
#: below it a generated kernel's single pass costs no more than the call.
COLUMN_SUM_MIN_ELEMENTS = 16384


def column_sum_in_library(x, axis, keepdims=False, dtype=None) -> bool:
    """Whether aten.sum.dim_IntList(x, axis, keepdims, dtype=dtype), an
    Inductor lowering's arguments, is a column reduction the library runs:
    x a floating-point loom tensor already in memory (a buffer or a view of
    one) with static sizes and at least COLUMN_SUM_MIN_ELEMENTS elements,
    summed over its leading dims (at least one kept), no dtype change."""
    from torch._inductor import ir

    sizes = _static_float_sizes(x, dtype)
    if sizes is None:
        return False
    ndim = len(sizes)
    if not isinstance(axis, (list, tuple)) or not axis or ndim < 2:
        return False
    dims = sorted({int(d) % ndim for d in axis})
    if dims != list(range(len(dims))) or len(dims) >= ndim:
        return False
    return math.prod(sizes) >= COLUMN_SUM_MIN_ELEMENTS and ir.is_storage_and_layout(x)


def whole_sum_in_library(x, axis=None, dtype=None) -> bool:
    """Whether the sum of all of x's elements (aten.sum.default, or
    sum.dim_IntList over every dim: `axis` None, empty or all dims) is the
    library's: x a floating-point loom tensor with static sizes and at least
    COLUMN_SUM_MIN_ELEMENTS elements, contiguous in memory (a buffer or a
    view of one), no dtype change. Inductor generates a sum to one element
    as a single chunk, one worker reading it all; the library's sum shares
    the tensor among the workers and adds their parts in a fixed order (the
    bits eager gets, whatever the thread count)."""
    from torch._inductor import ir

    sizes = _static_float_sizes(x, dtype)
    if not sizes:
        return False
    if axis is not None:
        if not isinstance(axis, (list, tuple)):
            return False
        if axis and sorted({int(d) % len(sizes) for d in axis}) != list(range(len(sizes))):
            return False
    return math.prod(sizes) >= COLUMN_SUM_MIN_ELEMENTS and ir.is_contiguous_storage_and_layout(x)


def _static_float_sizes(x, dtype):
    """x's sizes as ints when x is a floating-point loom IR node with static
    sizes and `dtype` keeps its dtype; else None."""
    from torch._inductor import ir

    if not isinstance(x, ir.IRNode) or dtype not in (None, x.get_dtype()):
        return None
    device = x.get_device()
    if device is None or device.type != _LOOM or not x.get_dtype().is_floating_point:
        return None
    try:
        return [int(s) for s in x.get_size()]
    except TypeError:  # symbolic sizes
        return None


def _column_sum_on_loom(original):
    from torch._inductor.lowering import fallback_handler

    extern = fallback_handler(aten.sum.dim_IntList, add_to_fallback_set=False)

    def lowering(x, axis=None, keepdim=False, *, dtype=None):
        if column_sum_in_library(x, axis, keepdim, dtype) or whole_sum_in_library(x, axis, dtype):
            return extern(x, axis, keepdim, dtype=dtype)
        return original(x, axis, keepdim, dtype=dtype)

    lowering._loom = True
    lowering.__wrapped__ = original
    return lowering


def _whole_sum_on_loom(original):
    """aten.sum.default's lowering: the library's sum for a loom tensor
    whole_sum_in_library accepts, `original` for the rest."""
    from torch._inductor.lowering import fallback_handler

    extern = fallback_handler(aten.sum.default, add_to_fallback_set=False)

    def lowering(x, *, dtype=None):
        if whole_sum_in_library(x, None, dtype):
            return extern(x) if dtype is None else extern(x, dtype=dtype)
        return original(x, dtype=dtype)

    lowering._loom = True
    lowering.__wrapped__ = original
    return lowering


def _whole_mean_on_loom(original):
    """aten.mean's lowering (both overloads): the library's mean of all of
    a loom tensor's elements where whole_sum_in_library accepts it (the
    same single-chunk reduction, then a division), `original` for the rest."""
    from torch._inductor.lowering import fallback_handler

    whole = fallback_handler(aten.mean.default, add_to_fallback_set=False)
    over_dims = fallback_handler(aten.mean.dim, add_to_fallback_set=False)

    def lowering(x, axis=None, keepdim=False, *, dtype=None):
        if whole_sum_in_library(x, axis, dtype):
            if axis is None:
                return whole(x)
            return over_dims(x, axis, keepdim)
        return original(x, axis, keepdim, dtype=dtype)

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


#: The attention ops whose row operands loom graphs pass contiguous, by the
#: positions of those operands: the forward's query, key and value; the
#: backward's output gradient, query, key, value and output. The mask (and
#: anything else) keeps Inductor's own constraint.
SDPA_ROW_OPERANDS = {
    aten._scaled_dot_product_fused_attention_overrideable.default: (0, 1, 2),
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: (0, 1, 2, 3, 6),
}


def _sdpa_rows_on_loom(op, original):
    """op's layout constraint: for loom graphs, its row operands contiguous
    (see the module's docstring); `original` (Inductor's) for the rest."""
    from torch._inductor import ir

    from . import config

    rows = SDPA_ROW_OPERANDS[op]

    def constraint(fx_node, *args, **kwargs):
        own = ()
        if config.sdpa_contiguous_rows and _node_on_loom(args, kwargs):
            own = [i for i in rows if i < len(args) and isinstance(args[i], ir.IRNode)
                   and len(args[i].get_size()) in (3, 4)]
        # Inductor's constraint (which keeps the operands' stride order) for
        # everything else: it maps arguments by position, and passes None on.
        rest = tuple(None if i in own else a for i, a in enumerate(args))
        if original is not None:
            rest, kwargs = original(fx_node, *rest, **kwargs)
        args = tuple(ir.ExternKernel.require_contiguous(args[i]) if i in own else a
                     for i, a in enumerate(rest))
        return args, kwargs

    constraint._loom = True
    constraint.__wrapped__ = original
    return constraint


def apply() -> None:
    """Installs the device checks in Inductor's decomposition table and
    lowerings (once)."""
    from torch._inductor import lowering as lowering_module
    from torch._inductor.decomposition import decompositions
    from torch._inductor.lowering import lowerings

    for op in LIBRARY_OPS:
        decompose = decompositions.get(op)
        if decompose is not None and not getattr(decompose, "_loom", False):
            decompositions[op] = _keep_whole_on_loom(op, decompose)
        lowering = lowerings.get(op)
        if not getattr(lowering, "_loom", False):
            lowerings[op] = _extern_on_loom(op, lowering)
    column_sum = lowerings[aten.sum.dim_IntList]
    if not getattr(column_sum, "_loom", False):
        lowerings[aten.sum.dim_IntList] = _column_sum_on_loom(column_sum)
    whole_sum = lowerings[aten.sum.default]
    if not getattr(whole_sum, "_loom", False):
        lowerings[aten.sum.default] = _whole_sum_on_loom(whole_sum)
    for op in (aten.mean.default, aten.mean.dim):
        mean = lowerings[op]
        if not getattr(mean, "_loom", False):
            lowerings[op] = _whole_mean_on_loom(mean)
    cat = lowerings[aten.cat.default]
    if not getattr(cat, "_loom", False):
        lowerings[aten.cat.default] = _cat_as_on_cpu(cat)
    for op in SDPA_ROW_OPERANDS:
        constraint = lowering_module.maybe_layout_constraints(op)
        if not getattr(constraint, "_loom", False):
            lowering_module.add_layout_constraint(op, _sdpa_rows_on_loom(op, constraint))
