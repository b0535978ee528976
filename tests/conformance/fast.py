"""The fast subset that `make test` runs: the most used ops at float32, plus
cheap pairs of the expectation file (the ratchet), spread over its ops."""

import collections
import json
import os

from . import catalog

# The ops models spend their time in and users call most (OpInfo full names):
# arithmetic, activations, reductions, matmuls, normalization, losses,
# convolution/pooling, indexing, shape and creation ops.
COMMON_OPS = [
    # arithmetic and comparison
    "add", "sub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding",
    "true_divide", "rsub", "neg", "abs", "sign", "reciprocal", "pow", "sqrt", "rsqrt",
    "square", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan",
    "tanh", "sigmoid", "erf", "erfinv", "floor", "ceil", "round", "trunc", "frac", "fmod",
    "remainder", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "lerp", "addcmul",
    "addcdiv", "where", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite",
    "logical_not", "logical_and", "logical_or", "bitwise_and", "nan_to_num", "atan2",
    "masked_fill", "hypot", "xlogy", "logaddexp",
    # activations
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.elu",
    "nn.functional.leaky_relu", "nn.functional.hardtanh", "nn.functional.softplus",
    "nn.functional.mish", "nn.functional.hardswish", "nn.functional.hardsigmoid",
    "nn.functional.logsigmoid", "nn.functional.glu", "nn.functional.relu6",
    "nn.functional.threshold", "softmax", "log_softmax", "nn.functional.softmin",
    # reductions
    "sum", "mean", "prod", "amax", "amin", "max.reduction_with_dim", "max.reduction_no_dim",
    "min.reduction_with_dim", "min.reduction_no_dim", "argmax", "argmin", "var", "std",
    "var_mean", "norm", "linalg.vector_norm", "logsumexp", "cumsum", "cumprod", "all", "any",
    "count_nonzero", "topk", "sort", "argsort",
    # matmul family
    "mm", "bmm", "matmul", "addmm", "baddbmm", "addmv", "mv", "dot", "outer", "einsum",
    "nn.functional.linear", "nn.functional.scaled_dot_product_attention",
    # normalization, losses, embedding, dropout
    "nn.functional.layer_norm", "native_layer_norm", "nn.functional.rms_norm",
    "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss", "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.embedding", "nn.functional.dropout", "nn.functional.one_hot",
    # convolution and pooling
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "nn.functional.pad.constant",
    "nn.functional.interpolate.nearest",
    # indexing
    "gather", "scatter", "scatter_add", "index_select", "index_add", "index_put",
    "__getitem__", "masked_select", "take_along_dim", "nonzero", "tril", "triu",
    # shape and layout
    "cat", "stack", "split", "chunk", "view", "reshape", "flatten", "unflatten", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "expand", "repeat", "flip", "roll", "narrow",
    "select", "slice", "contiguous", "clone", "as_strided", "diagonal", "unbind", "movedim",
    # creation and conversion
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "eye",
    "empty_like", "rand_like", "to", "float", "fill", "zero_",
]

CHEAP_S = 0.5  # a pair of the expectation file is cheap if it ran faster than this
# Recorded worker-seconds spent on expected pairs: every op of the expectation
# file gets its cheapest pair, then its second cheapest, and so on, while the
# budget lasts (the subset then runs in about a minute on two cores); the full
# sweep (`make conformance`) covers the rest.
BUDGET_S = 60.0


def common_pairs():
    db = catalog.op_db()
    return [(op, "float32") for op in COMMON_OPS if op in db and "float32" in catalog.cpu_dtypes(db[op])]


def pair_seconds(results_json):
    """{(op, dtype): seconds} from a results.json, if there is one."""
    if not os.path.exists(results_json):
        return {}
    with open(results_json) as f:
        doc = json.load(f)
    return {(r["op"], r["dtype"]): r.get("seconds", 0.0) for r in doc.get("results", [])}


def fast_pairs(expected, results_json, cheap_s=CHEAP_S, budget_s=BUDGET_S):
    """The fast subset: the common ops at float32, then the expected pairs
    that are cheap (by their time in results.json; a pair with no recorded
    time counts as cheap) in rounds over the ops: round k takes each op's
    k-th cheapest pair, cheapest first, until the time budget is spent. So
    every op with a cheap pair is checked before any op gets a second."""
    db = catalog.op_db()
    seconds = pair_seconds(results_json)
    pairs = list(common_pairs())
    seen = set(pairs)
    by_op = collections.defaultdict(list)
    for p in expected:
        cost = seconds.get(p, 0.0)
        if p not in seen and p[0] in db and p[1] in catalog.cpu_dtypes(db[p[0]]) and cost <= cheap_s:
            by_op[p[0]].append((cost, p))
    for costs in by_op.values():
        costs.sort()
    spent, k = 0.0, 0
    while True:
        round_k = sorted(costs[k] for costs in by_op.values() if len(costs) > k)
        if not round_k:
            return pairs
        for cost, p in round_k:
            if spent + cost > budget_s:
                return pairs
            pairs.append(p)
            spent += cost
        k += 1
