"""Adaptive eager's compiled regions: a signature the runtime saw repeatedly
(loom/fuse.h) -> the kernel IR -> C through the C dialect -> the JIT.

The runtime's executor groups queued elementwise launches (level 1); a
run of float ``pointwise.apply`` members of a group (a segment: the members
between two layer norms, say) has a signature: per member its
op code, compute kind, output argument, whether the output is stored, and
per input an earlier member's value, a tensor argument or the member's
constant. This module turns it into one pointwise ``LoopKernel`` over the
group's range (every tensor rank 1 and contiguous, or rank 0: one element
read broadcast; with a row vector, a (width,) tensor read at i % width, the
range is (rows, width), the contiguous tensors rank 2 and the row vectors
following the inner dim, so the loop runs along rows and vectorizes; the
width is the descriptors', not compiled in) whose statements are the
members in program order, each an ``Op`` rounded to its output's dtype
(the library's rounding: the value a later member reads is the one the
store would have left), and emits it with the compiler's C dialect, which
spells each op as the library does. Op parameters and constants are the
kernel's scalar arguments (loaded once per call), so the step-dependent
factors of an optimizer do not recompile; only pow's exponent is part of
the signature, since it picks the op's form.

:func:`serve` is the loop of a daemon thread (torch_loom.loom.fusion starts
it) that waits (without the GIL) for the runtime's requests, compiles each
off the Python thread and installs it; without a C compiler nothing is
installed (one warning) and the groups run at level 1.
"""

from __future__ import annotations

import hashlib
import struct

import torch

from .. import _C
from . import jit
from .emit_c import CDialect, convert, literal, op_expr, to_dtype
from .ir import F32, F64, Arg, Load, LoadScalar, LoopKernel, Op, Pass, Store, kind_of

#: loom_pw_op names (LOOM_PW_<name>) -> the kernel IR's op, with the library's
#: parameters each takes (the IR's p0, p1, ...).
OPS = {
    "IDENTITY": ("identity", 0), "ABS": ("abs", 0), "NEG": ("neg", 0), "SIGN": ("sign", 0),
    "EXP": ("exp", 0), "EXP2": ("exp2", 0), "EXPM1": ("expm1", 0), "LOG": ("log", 0),
    "LOG2": ("log2", 0), "LOG10": ("log10", 0), "LOG1P": ("log1p", 0), "SQRT": ("sqrt", 0),
    "RSQRT": ("rsqrt", 0), "SQUARE": ("square", 0), "SIN": ("sin", 0), "COS": ("cos", 0),
    "TAN": ("tan", 0), "ASIN": ("asin", 0), "ACOS": ("acos", 0), "ATAN": ("atan", 0),
    "SINH": ("sinh", 0), "COSH": ("cosh", 0), "TANH": ("tanh", 0), "SIGMOID": ("sigmoid", 0),
    "ERF": ("erf", 0), "ERFC": ("erfc", 0), "FLOOR": ("floor", 0), "CEIL": ("ceil", 0),
    "ROUND": ("round", 0), "TRUNC": ("trunc", 0), "RECIPROCAL": ("reciprocal", 0),
    "RELU": ("relu", 0), "GELU": ("gelu", 0), "GELU_TANH": ("gelu_tanh", 0), "SILU": ("silu", 0),
    "CLAMP": ("clamp", 2), "POW_SCALAR": ("pow_scalar", 0), "RPOW_SCALAR": ("rpow_scalar", 0),
    "ADD": ("add_alpha", 1), "SUB": ("sub_alpha", 1), "MUL": ("mul", 0), "DIV": ("div", 0),
    "DIV_TRUNC": ("div_trunc", 0), "DIV_FLOOR": ("div_floor", 0), "POW": ("pow", 0),
    "MAXIMUM": ("maximum", 0), "MINIMUM": ("minimum", 0), "LERP_SCALAR": ("lerp_scalar", 1),
    "THRESHOLD_BACKWARD": ("threshold_backward", 1), "SIGMOID_BACKWARD": ("sigmoid_backward", 0),
    "TANH_BACKWARD": ("tanh_backward", 0), "GELU_BACKWARD": ("gelu_backward", 0),
    "GELU_TANH_BACKWARD": ("gelu_tanh_backward", 0), "SILU_BACKWARD": ("silu_backward", 0),
    "WHERE": ("where", 0), "LERP": ("lerp", 0), "ADDCMUL": ("addcmul", 1),
    "ADDCDIV": ("addcdiv", 1),
}

# loom_dtype codes of the dtypes a region holds (loom/kernel_abi.h).
_DTYPES = {0: torch.float32, 1: torch.float64, 2: torch.float16, 3: torch.bfloat16}
_KINDS = {0: F32, 1: F64}
_VALUE, _ARG, _CONST = 1, 2, 3
# an argument's access: contiguous over the range, one element read
# broadcast, a row vector (element i at i % width)
_CONTIGUOUS, _ONE, _ROW = 0, 1, 2
_MEMBER_WORDS, _MEMBER_SCALARS = 9, 7


class _Param:
    """An op parameter read from a scalar argument, loaded once (SSA id)."""

    __slots__ = ("id",)

    def __init__(self, ssa):
        self.id = ssa


class RegionDialect(CDialect):
    """The C dialect, with op parameters that are scalar arguments of the
    kernel (loaded once per call, as the library converts its parameters:
    to the compute kind) rather than literals."""

    def stmt(self, s, k, offset, fast=False):
        if isinstance(s, Op) and any(isinstance(p, _Param) for p in s.params):
            xs = [convert(f"v{a}", kind_of(k.types[a]), s.kind) for a in s.srcs]
            params = [f"v{p.id}" if isinstance(p, _Param) else literal(p, s.kind) for p in s.params]
            expr = op_expr(s.op, s.kind, xs, params)
            return f"const {self.value_type(s.dtype)} v{s.dst} = {to_dtype(expr, s.kind, s.dtype)};"
        return super().stmt(s, k, offset, fast) if fast else super().stmt(s, k, offset)


def _codes():
    return {code: name for name, code in _C._fuse_pw_ops().items() if name in OPS}


def kernel_name(words) -> str:
    digest = hashlib.sha256(struct.pack(f"<{len(words)}i", *words)).hexdigest()[:24]
    return f"loom_region_{digest}"


def build(words, codes=None) -> LoopKernel:
    """The LoopKernel of a region's signature (loom/fuse.h)."""
    codes = codes or _codes()
    n, nargs = words[0], words[1]
    accesses = [words[2 + 3 * a + 1] for a in range(nargs)]
    rows = _ROW in accesses  # a row vector: the loop runs over (rows, width)
    dimmaps = {_CONTIGUOUS: (0, 1) if rows else (0,), _ONE: (), _ROW: (1,)}
    args, pos = [], 2
    for _ in range(nargs):
        dtype, access, written = words[pos:pos + 3]
        pos += 3
        args.append(Arg(_DTYPES[dtype], dimmaps[access], bool(written)))
    types, before, body, loads, values = {}, [], [], {}, {}
    scalars = [torch.float64] * (n * _MEMBER_SCALARS)

    def new(dtype):
        types[len(types)] = dtype
        return len(types) - 1

    def scalar(index, kind):
        dtype = torch.float32 if kind == F32 else torch.float64
        scalars[index] = dtype
        ssa = new(dtype)
        before.append(LoadScalar(ssa, index))
        return ssa

    summary = []
    for m in range(n):
        w = words[pos:pos + _MEMBER_WORDS]
        pos += _MEMBER_WORDS
        code, kind, out, stored = w[0], _KINDS[w[1]], w[2], w[3]
        name = codes[code]
        op, nparams = OPS[name]
        params = tuple(_Param(scalar(m * _MEMBER_SCALARS + i, kind)) for i in range(nparams))
        if name in ("POW_SCALAR", "RPOW_SCALAR"):
            p0 = struct.unpack("<d", struct.pack("<II", w[7] & 0xFFFFFFFF, w[8] & 0xFFFFFFFF))[0]
            params = (p0,)
            if name == "POW_SCALAR" and p0 == 3:  # the library's own forms
                op, params = "cube", ()
            elif name == "POW_SCALAR" and p0 == -2:
                op, params = "inv_square", ()
        srcs = []
        for src in w[4:7]:
            if src < 0:
                continue
            where, index = src >> 16, src & 0xFFFF
            if where == _VALUE:
                srcs.append(values[index])
            elif where == _ARG:
                if index not in loads:
                    loads[index] = new(args[index].dtype)
                    body.append(Load(loads[index], index))
                srcs.append(loads[index])
            else:
                srcs.append(scalar(m * _MEMBER_SCALARS + 4 + index, kind))
        dtype = args[out].dtype
        values[m] = new(dtype)
        body.append(Op(values[m], op, kind, tuple(srcs), dtype, params))
        if stored:
            body.append(Store(out, values[m]))
        summary.append(op)
    dims = (1 << 20, 1 << 20) if rows else (1 << 20,)  # sizes are read from the arguments
    return LoopKernel(name=kernel_name(words), dims=dims, n_outer=len(dims), args=args,
                      before=before, passes=[Pass(body=body)], types=types, ops=n,
                      summary="compiled region: " + " ".join(summary), aliased=False,
                      scalars=scalars)


def source(words, codes=None):
    """(C source, kernel name, compile flags) of a region's signature."""
    k = build(words, codes)
    d = RegionDialect()
    return d.module([k]), k.name, d.compile_flags()


def serve():
    """The compiler thread's loop (torch_loom.loom.fusion starts it): tells
    the runtime which ops it spells, then takes requests until stopped."""
    codes = _codes()
    _C._fuse_region_set_ops(sorted(codes))
    while True:
        request = _C._fuse_region_next(1000)
        if request is False:
            return
        if request is None:
            continue
        rid, words = request
        try:
            if not jit.available():  # warns once
                _C._fuse_region_set_ops(None)  # level 1 only, from now on
                _C._fuse_region_install(rid, None)
                continue
            code, name, flags = source(words, codes)
            jit.compile_async(code, [name], extra_flags=flags).result()
            _C._fuse_region_install(rid, name)
        except Exception:  # a region that cannot be made stays at level 1
            _C._fuse_region_install(rid, None)
