"""The ATen ops the lowering turns into Pointwise and Reduce nodes (by
overload packet), the views it reads through and the fills it turns into
literals. An op missing here runs as a Library node.

Op names are those of the kernel IR (emit.py lists their meaning); the
compute kind follows eager: the output's dtype for arithmetic (float for
float16 and bfloat16), the promoted inputs' for comparisons.
"""

from __future__ import annotations

import math

import torch

from . import ir
from .ir import F64, I64, Scalar, Value
from .lower import Unsupported, aten, compute_kind, count_of, prims

HANDLERS = {}


def handles(*packets):
    def register(fn):
        for p in packets:
            HANDLERS[p] = fn
        return fn
    return register


def _out(low, node):
    out = low.value_of(node.meta.get("val"), node.name)
    if out is None:
        raise Unsupported("non-tensor result")
    return out


def _float_kind(out):
    kind = ir.kind_of(out.dtype)
    if kind == I64:
        raise Unsupported("integer result of a floating op")
    return kind


# ---- unary ---------------------------------------------------------------------

_FLOAT_UNARY = {
    aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1", aten.log: "log", aten.log2: "log2",
    aten.log10: "log10", aten.log1p: "log1p", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.tanh: "tanh", aten.sigmoid: "sigmoid",
    aten.erf: "erf", aten.erfc: "erfc", aten.reciprocal: "reciprocal", aten.silu: "silu",
    aten.atan: "atan", aten.asin: "asin", aten.acos: "acos", aten.sinh: "sinh", aten.cosh: "cosh",
}
_ANY_UNARY = {
    aten.neg: "neg", aten.abs: "abs", aten.relu: "relu", aten.sign: "sign", aten.floor: "floor",
    aten.ceil: "ceil", aten.trunc: "trunc",
}


def _unary_float(op):
    def h(low, target, node, a):
        out = _out(low, node)
        return low.pointwise(op, [a["self"]], _float_kind(out), out)
    return h


def _unary_any(op):
    def h(low, target, node, a):
        out = _out(low, node)
        kind = ir.kind_of(out.dtype)
        if kind == I64 and op in ("floor", "ceil", "trunc"):
            return low.convert(a["self"], out)
        return low.pointwise(op, [a["self"]], kind, out)
    return h


for _p, _op in _FLOAT_UNARY.items():
    HANDLERS[_p] = _unary_float(_op)
for _p, _op in _ANY_UNARY.items():
    HANDLERS[_p] = _unary_any(_op)


@handles(aten.round)
def _round(low, target, node, a):
    if a.get("decimals", 0):
        raise Unsupported("round with decimals")
    out = _out(low, node)
    kind = ir.kind_of(out.dtype)
    return low.convert(a["self"], out) if kind == I64 else low.pointwise("round", [a["self"]], kind, out)


@handles(aten.gelu)
def _gelu(low, target, node, a):
    out = _out(low, node)
    op = "gelu_tanh" if a.get("approximate") == "tanh" else "gelu"
    return low.pointwise(op, [a["self"]], _float_kind(out), out)


@handles(aten.isnan, aten.isinf, aten.logical_not)
def _unary_bool(low, target, node, a):
    out = _out(low, node)
    x = a["self"]
    kind = ir.kind_of(x.dtype) if isinstance(x, Value) else F64
    return low.pointwise(target.overloadpacket.__name__, [x], kind, out)


@handles(aten.bitwise_not)
def _bitwise_not(low, target, node, a):
    out = _out(low, node)
    if ir.kind_of(out.dtype) != I64:
        raise Unsupported("bitwise_not of a float")
    return low.pointwise("logical_not" if out.dtype == torch.bool else "bitwise_not",
                         [a["self"]], I64, out)


# ---- binary ------------------------------------------------------------------------

def _alpha(a):
    alpha = a.get("alpha", 1)
    return 1 if alpha is None else alpha


@handles(aten.add, aten.sub)
def _add_sub(low, target, node, a):
    out = _out(low, node)
    op = target.overloadpacket.__name__
    alpha = _alpha(a)
    kind = ir.kind_of(out.dtype)
    if alpha == 1:
        return low.pointwise(op, [a["self"], a["other"]], kind, out)
    return low.pointwise(op + "_alpha", [a["self"], a["other"]], kind, out, params=(alpha,))


@handles(aten.rsub)
def _rsub(low, target, node, a):
    out = _out(low, node)
    alpha = _alpha(a)
    kind = ir.kind_of(out.dtype)
    if alpha == 1:
        return low.pointwise("sub", [a["other"], a["self"]], kind, out)
    return low.pointwise("sub_alpha", [a["other"], a["self"]], kind, out, params=(alpha,))


@handles(aten.mul)
def _mul(low, target, node, a):
    out = _out(low, node)
    kind = ir.kind_of(out.dtype)
    return low.pointwise("logical_and" if out.dtype == torch.bool else "mul",
                         [a["self"], a["other"]], kind, out)


@handles(aten.div)
def _div(low, target, node, a):
    out = _out(low, node)
    kind = ir.kind_of(out.dtype)
    mode = a.get("rounding_mode")
    if mode is None:
        return low.pointwise("div", [a["self"], a["other"]], _float_kind(out), out)
    if kind == I64:
        raise Unsupported("integer division with a rounding mode")
    return low.pointwise("div_trunc" if mode == "trunc" else "div_floor",
                         [a["self"], a["other"]], kind, out)


@handles(aten.maximum, aten.minimum)
def _maxmin(low, target, node, a):
    out = _out(low, node)
    return low.pointwise(target.overloadpacket.__name__, [a["self"], a["other"]],
                         ir.kind_of(out.dtype), out)


@handles(aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge, aten.logical_and,
         aten.logical_or, aten.logical_xor)
def _compare(low, target, node, a):
    out = _out(low, node)
    x, y = a["self"], a["other"]
    return low.pointwise(target.overloadpacket.__name__, [x, y], compute_kind(x, y), out)


@handles(aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor)
def _bitwise(low, target, node, a):
    out = _out(low, node)
    if ir.kind_of(out.dtype) != I64:
        raise Unsupported("bitwise op on floats")
    name = target.overloadpacket.__name__
    if out.dtype == torch.bool:
        name = {"bitwise_and": "logical_and", "bitwise_or": "logical_or",
                "bitwise_xor": "logical_xor"}[name]
    return low.pointwise(name, [a["self"], a["other"]], I64, out)


@handles(aten.pow)
def _pow(low, target, node, a):
    out = _out(low, node)
    kind = ir.kind_of(out.dtype)
    if kind == I64:
        raise Unsupported("integer pow")
    base, exp = a["self"], a["exponent"]
    if isinstance(base, Value) and not isinstance(exp, Value):
        e = float(exp)
        special = {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal", -0.5: "rsqrt",
                   1.0: "identity", 3.0: "cube", -2.0: "inv_square"}
        if e in special:
            return low.pointwise(special[e], [base], kind, out)
        return low.pointwise("pow_scalar", [base], kind, out, params=(e,))
    if not isinstance(base, Value):
        return low.pointwise("rpow_scalar", [exp], kind, out, params=(float(base),))
    return low.pointwise("pow", [base, exp], kind, out)


@handles(aten.where)
def _where(low, target, node, a):
    if target != aten.where.self:
        raise Unsupported("where without branches")
    out = _out(low, node)
    return low.pointwise("where", [a["condition"], a["self"], a["other"]], ir.kind_of(out.dtype), out)


@handles(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(low, target, node, a):
    out = _out(low, node)
    kind = ir.kind_of(out.dtype)
    name = target.overloadpacket.__name__
    lo = a.get("min") if name != "clamp_max" else None
    hi = a.get("max") if name != "clamp_min" else None
    if isinstance(lo, Value) or isinstance(hi, Value):
        raise Unsupported("clamp with tensor bounds")
    big = math.inf if kind != I64 else 2**63 - 1
    lo = -big if lo is None else lo
    hi = big if hi is None else hi
    if kind == I64:
        lo, hi = int(lo) if lo != -big else -(2**63), int(hi)
    return low.pointwise("clamp", [a["self"]], kind, out, params=(lo, hi))


@handles(aten.addcmul, aten.addcdiv)
def _addc(low, target, node, a):
    out = _out(low, node)
    name = target.overloadpacket.__name__
    kind = _float_kind(out) if name == "addcdiv" else ir.kind_of(out.dtype)
    value = a.get("value", 1)
    if isinstance(value, Value):
        raise Unsupported(f"{name} with a tensor value")
    return low.pointwise(name, [a["self"], a["tensor1"], a["tensor2"]], kind, out, params=(value,))


def _fma(low, target, node, a):
    """prims.fma(a, b, c), which Dynamo writes for add_ with a tensor alpha
    and for addcdiv_: a * b + c rounded twice, as the eager ops it stands for."""
    out = _out(low, node)
    args = [a[k] for k in list(a)[:3]]
    kind = ir.kind_of(out.dtype)
    prod = low.pointwise("mul", args[:2], kind, (out.shape, out.dtype))
    return low.pointwise("add", [prod, args[2]], kind, out)


HANDLERS["prims::fma"] = _fma  # by name: the op exists once Inductor's prims are imported


@handles(aten.lerp)
def _lerp(low, target, node, a):
    out = _out(low, node)
    weight = a["weight"]
    if isinstance(weight, Value):
        return low.pointwise("lerp", [a["self"], a["end"], weight], _float_kind(out), out)
    return low.pointwise("lerp_scalar", [a["self"], a["end"]], _float_kind(out), out,
                         params=(weight,))


# ---- backward forms that survive decomposition -----------------------------------

@handles(aten.threshold_backward)
def _threshold_backward(low, target, node, a):
    out = _out(low, node)
    return low.pointwise("threshold_backward", [a["grad_output"], a["self"]], ir.kind_of(out.dtype),
                         out, params=(a["threshold"],))


@handles(aten.sigmoid_backward, aten.tanh_backward, aten.silu_backward)
def _act_backward(low, target, node, a):
    out = _out(low, node)
    y = a["output"] if "output" in a else a["self"]
    return low.pointwise(target.overloadpacket.__name__, [a["grad_output"], y],
                         _float_kind(out), out)


@handles(aten.gelu_backward)
def _gelu_backward(low, target, node, a):
    out = _out(low, node)
    op = "gelu_tanh_backward" if a.get("approximate") == "tanh" else "gelu_backward"
    return low.pointwise(op, [a["grad_output"], a["self"]], _float_kind(out), out)


# ---- copies and casts ---------------------------------------------------------------

@handles(prims.convert_element_type, aten.clone)
def _convert(low, target, node, a):
    x = a.get("a", a.get("self"))
    if not isinstance(x, Value):
        raise Unsupported("convert of a non-tensor")
    return low.convert(x, _out(low, node))


@handles(aten.lift_fresh_copy)
def _lift_fresh_copy(low, target, node, a):
    """A copy of a tensor the graph holds (torch.tensor(...) in the traced
    code): kernels only read it, so they read the original (a returned one
    is cloned by the program)."""
    x = a["self"]
    if isinstance(x, Value) and isinstance(x.producer, ir.Constant):
        return x
    raise Unsupported("lift_fresh_copy of a computed tensor")


@handles(aten._to_copy)
def _to_copy(low, target, node, a):
    x, out = a["self"], _out(low, node)
    if not isinstance(x, Value) or x.device != out.device or a.get("layout") not in (None, torch.strided):
        raise Unsupported("_to_copy across devices")
    return low.convert(x, out)


@handles(aten.copy)
def _copy(low, target, node, a):
    return low.convert(a["src"], _out(low, node))


@handles(aten.copy_)
def _copy_into_input(low, target, node, a):
    """copy_(input, value), which functionalized graphs end with for each
    input they update (optimizer state, batch norm statistics): the value
    is written straight into the input's memory by the kernel computing it."""
    dst, src = a["self"], a["src"]
    if not isinstance(dst, Value) or not isinstance(dst.producer, ir.Input) or dst.stride is None:
        raise Unsupported("copy_ into a non-input")
    meta = torch.empty_strided(dst.shape, dst.stride, dtype=dst.dtype, device="meta")
    if not torch._prims_common.is_non_overlapping_and_dense_or_false(meta):
        raise Unsupported("copy_ into an overlapping input")
    out = Value(dst.shape, dst.dtype, dst.stride, dst.device, f"{node.name}_into_{dst.name}")
    out.alias = dst
    kind = ir.kind_of(src.dtype) if isinstance(src, Value) else ir.kind_of(dst.dtype)
    return low.convert(src, out) if isinstance(src, Value) else \
        low.pointwise("identity", [src], kind, out)


# ---- reductions ---------------------------------------------------------------------

def _dims(a):
    dims = a.get("dim")
    if dims is None:
        return []
    return [dims] if isinstance(dims, int) else list(dims)


#: The fewest elements of a column sum the library runs (_library_column_sum).
LIBRARY_COLUMN_SUM_MIN = 16384


def _in_memory(v) -> bool:
    """Whether no kernel of this graph computes v: a graph input or a
    library op's result, also through views."""
    while True:
        p = v.producer
        if p is None or isinstance(p, (ir.Input, ir.Constant)):
            return True
        if not isinstance(p, ir.Library):
            return False
        if p.view is None:
            return True
        v = p.view[0]


def _library_column_sum(x, dims, dtype) -> bool:
    """Whether a sum of x over `dims` runs as the library's sum: a sum
    over the leading dims (at least one dim kept) of a row-major float
    tensor already in memory, with no dtype change (a linear layer's bias
    gradient: the output gradient summed over its rows). The library's
    column sums stream whole rows, where the generated column form reads a
    run of each row per chunk; there is no prologue to fuse, and the sum
    is the one eager's autograd calls (the same bits)."""
    rank = len(x.shape)
    if (dtype not in (None, x.dtype) or x.dtype not in (torch.float32, torch.float64)
            or not 0 < len(dims) < rank or x.stride is None):
        return False
    if sorted(d % rank for d in dims) != list(range(len(dims))):
        return False
    if (tuple(x.stride) != tuple(ir.contiguous_strides(x.shape))
            or math.prod(x.shape) < LIBRARY_COLUMN_SUM_MIN):
        return False
    return _in_memory(x)


@handles(aten.sum)
def _sum(low, target, node, a):
    out, x = _out(low, node), a["self"]
    dtype = a.get("dtype")
    if _library_column_sum(x, _dims(a), dtype):
        raise Unsupported("a column sum of a tensor in memory: the library's")
    if dtype is not None and dtype != x.dtype:
        x = low.convert(x, (x.shape, dtype))
    s = low.reduce("sum", x, _dims(a), a.get("keepdim", False), ir.acc_dtype(x.dtype))
    return low.convert(s, out)


@handles(aten.mean)
def _mean(low, target, node, a):
    out, x = _out(low, node), a["self"]
    if not out.dtype.is_floating_point:
        raise Unsupported("mean of integers")
    dims = _dims(a)
    s = low.reduce("sum", x, dims, a.get("keepdim", False), torch.float64)
    return low.pointwise("div", [s, Scalar(count_of(x, dims))], F64, out)


@handles(aten.amax, aten.amin, aten.max, aten.min)
def _amax(low, target, node, a):
    name = target.overloadpacket.__name__
    if name in ("max", "min") and target._overloadname != "default":
        raise Unsupported("max/min with indices")
    out, x = _out(low, node), a["self"]
    if out.dtype != x.dtype:
        raise Unsupported("max/min changing dtype")
    op = "max" if name in ("amax", "max") else "min"
    r = low.reduce(op, x, _dims(a), a.get("keepdim", False), x.dtype)
    return low.convert(r, out)


@handles(aten.var_mean, aten.var)
def _var_mean(low, target, node, a):
    if target._overloadname != "correction":
        raise Unsupported(f"{target} (decomposed to .correction)")
    x = a["self"]
    if not isinstance(x, Value) or not x.dtype.is_floating_point:
        raise Unsupported("var of integers")
    fake = node.meta.get("val")
    outs = [low.value_of(f) for f in (fake if isinstance(fake, (tuple, list)) else [fake])]
    dims, keepdim = _dims(a), a.get("keepdim", False)
    correction = a.get("correction")
    correction = 1 if correction is None else correction
    n = count_of(x, dims)
    rank = len(x.shape)
    # The mean in double, kept with the reduced dims as size 1 so that it
    # broadcasts against x; then the squared deviations, summed in double.
    s = low.reduce("sum", x, dims, True, torch.float64)
    mean_d = low.pointwise("div", [s, Scalar(n)], F64, (s.shape, torch.float64))
    xd = low.convert(x, (x.shape, torch.float64))
    dev = low.pointwise("sub", [xd, mean_d], F64, (x.shape, torch.float64))
    sq = low.pointwise("mul", [dev, dev], F64, (x.shape, torch.float64))
    ss = low.reduce("sum", sq, dims, keepdim, torch.float64)
    var = low.pointwise("div", [ss, Scalar(float(max(0, n - correction)))], F64, outs[0])
    if len(outs) == 1:
        return var
    reduced = set(d % rank for d in dims) if dims else set(range(rank))
    # mean_d (keepdim shape) read into the requested shape
    access, pos = [], 0
    for d in range(rank):
        if d in reduced and not keepdim:
            access.append(None)
            continue
        access.append(None if d in reduced else pos)
        pos += 1
    mean = low.pointwise("identity", [low.operand(mean_d, len(outs[1].shape), tuple(access))],
                         F64, outs[1])
    return (var, mean)


# ---- views and fills ------------------------------------------------------------------

_RESHAPES = {aten.view, aten._unsafe_view, aten.reshape, aten.unsqueeze, aten.squeeze,
             aten.alias, aten.view_copy, aten.squeeze_copy, aten.unsqueeze_copy}


def view_dimmap(target, args, kwargs, out: Value):
    """For a view of args[0] whose dims each follow one base dim or are
    size 1: for each output dim, the base dim (or None)."""
    packet = getattr(target, "overloadpacket", None)
    base = args[0] if args else None
    if not isinstance(base, Value) or base.dtype != out.dtype or base.device != out.device:
        return None
    if packet in (aten.permute, aten.t, aten.transpose):
        rank = len(base.shape)
        if packet == aten.permute:
            perm = [d % rank for d in args[1]]
        else:
            perm = list(range(rank))
            d0, d1 = (0, 1) if packet == aten.t else (args[1] % rank, args[2] % rank)
            if rank >= 2 or packet != aten.t:
                perm[d0], perm[d1] = perm[d1], perm[d0]
        return tuple(None if out.shape[j] == 1 else perm[j] for j in range(len(out.shape)))
    if packet == aten.expand:
        off = len(out.shape) - len(base.shape)
        dimmap = []
        for j, s in enumerate(out.shape):
            i = j - off
            dimmap.append(i if i >= 0 and base.shape[i] == s and s != 1 else None)
        return tuple(dimmap)
    if packet in _RESHAPES:
        b = [i for i, s in enumerate(base.shape) if s != 1]
        o = [j for j, s in enumerate(out.shape) if s != 1]
        if [base.shape[i] for i in b] != [out.shape[j] for j in o]:
            return None
        dimmap = [None] * len(out.shape)
        for i, j in zip(b, o):
            dimmap[j] = i
        return tuple(dimmap)
    return None


_FILLS = {aten.full: "fill_value", aten.scalar_tensor: "s", aten.full_like: "fill_value",
          aten.new_full: "fill_value"}
_ZERO_ONE = {aten.zeros_like: 0, aten.ones_like: 1, aten.zeros: 0, aten.ones: 1,
             aten.new_zeros: 0, aten.new_ones: 1}


def constant_of(target, a, out: Value):
    """The value every element of a fill holds (rounded to its dtype), or
    None."""
    packet = getattr(target, "overloadpacket", None)
    if packet in _FILLS:
        value = a.get(_FILLS[packet])
    elif packet in _ZERO_ONE:
        value = _ZERO_ONE[packet]
    else:
        return None
    if not isinstance(value, (bool, int, float)) or out.dtype not in ir.DTYPES:
        return None
    if out.device is None or out.device.type != "loom":
        return None
    if out.dtype == torch.bool:
        return bool(value)
    return torch.tensor(value, dtype=out.dtype).item()
