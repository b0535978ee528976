"""The interpreter (``LOOM_TILE_INTERPRET=1``): a kernel's Python function
run program by program on NumPy blocks, so ``print`` and ``breakpoint()``
work inside it. The ``tl.*`` functions here are the interpreter's; the
compiler reads the same calls from the source instead (lower.py).

Memory is a CPU copy of each argument's storage, written back after the
last program. An access outside an argument's storage raises IndexError
naming the kernel's source line; masked-off lanes of a load without
``other=`` read as NaN (float blocks; 0 for integers): a kernel that uses
them is caught here."""

from __future__ import annotations

import builtins
import itertools
import linecache
import sys
import threading

import numpy as np
import torch

from . import core

_NP = {"float16": np.float32, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64,
       "int1": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
       "uint8": np.uint8}

_state = threading.local()


def _round(a, d):
    if d is core.float16:
        return a.astype(np.float16).astype(np.float32)
    if d is core.bfloat16:
        a = np.asarray(a, dtype=np.float32)
        u = a.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        r = u.view(np.float32)
        return np.where(np.isnan(a), a, r)
    return np.asarray(a).astype(_NP[d.name], copy=False)


class Block:
    """A block (or scalar) of the interpreter: values in `a` (float16 and
    bfloat16 held in float32), dtype `dtype`."""

    def __init__(self, a, d):
        self.a = np.asarray(a)
        self.dtype = d

    shape = property(lambda self: tuple(self.a.shape))
    T = property(lambda self: trans(self))

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        return cast(self, dtype)

    def __repr__(self):
        return f"Block({self.a!r}, {self.dtype})"

    def __bool__(self):
        return bool(self.a)

    def __index__(self):
        return int(self.a)

    __int__ = __index__

    def __float__(self):
        return float(self.a)

    def __getitem__(self, key):
        return Block(self.a[key], self.dtype)

    def sum(self, axis=None, keep_dims=False):
        return sum(self, axis, keep_dims)

    def max(self, axis=None, keep_dims=False):
        return max(self, axis, keep_dims=keep_dims)

    def min(self, axis=None, keep_dims=False):
        return min(self, axis, keep_dims=keep_dims)


def _wrap(v):
    if isinstance(v, Block):
        return v, False
    if isinstance(v, core.constexpr):
        v = v.value
    if isinstance(v, (bool, int, float)):
        d = core.scalar_dtype(v)
        return Block(np.asarray(v, dtype=_NP[d.name] if d.kind != "i" or d.bits != 32 else np.int64), d), True
    raise TypeError(f"{type(v).__name__} is not a block")


def _binary(op, x, y):
    if isinstance(x, Pointer) or isinstance(y, Pointer):
        return _ptr_arith(op, x, y)
    x, xw = _wrap(x)
    y, yw = _wrap(y)
    d = core.promote(x.dtype, y.dtype, xw, yw, div=(op == "truediv"))
    t = _NP[d.name]
    a, b = x.a.astype(t, copy=False), y.a.astype(t, copy=False)
    with np.errstate(all="ignore"):
        if op in _CMP:
            return Block(_CMP[op](a, b), core.int1)
        if op == "floordiv":
            if d.kind == "f":
                r = np.floor(a / b)
            else:
                bz = np.where(b == 0, 1, b)
                q = np.abs(a) // np.abs(bz)
                r = np.where((a < 0) != (bz < 0), -q, q)
        elif op == "mod":
            r = np.fmod(a, np.where(b == 0, 1, b) if d.kind != "f" else b)
        elif op == "maximum":
            r = np.maximum(a, b)
        elif op == "minimum":
            r = np.minimum(a, b)
        else:
            r = _OPS[op](a, b)
    return Block(_round(r, d), d)


_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
        "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
        "lshift": np.left_shift, "rshift": np.right_shift, "pow": np.power}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}

for _name in list(_OPS) + list(_CMP) + ["floordiv", "mod"]:
    setattr(Block, f"__{_name}__", (lambda op: lambda s, o: _binary(op, s, o))(_name))
    if _name not in _CMP:
        setattr(Block, f"__r{_name}__", (lambda op: lambda s, o: _binary(op, o, s))(_name))
Block.__neg__ = lambda s: Block(_round(-s.a, s.dtype), s.dtype)
Block.__pos__ = lambda s: s
Block.__invert__ = lambda s: Block(~s.a, s.dtype)
Block.__hash__ = None


class Buffer:
    """A CPU copy of one argument's storage."""

    def __init__(self, tensor, name):
        self.tensor = tensor
        self.name = name
        st = tensor.untyped_storage()
        n = st.nbytes() // tensor.element_size()
        whole = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(st, 0, (n,), (1,))
        self.whole = whole
        host = whole.detach().cpu().clone()
        self.host = host
        self.raw = host.view(torch.int16).numpy().view(np.uint16) if tensor.dtype == torch.bfloat16 \
            else host.numpy()
        self.dirty = False

    def write_back(self):
        if self.dirty:
            self.whole.copy_(self.host)


class Pointer:
    def __init__(self, buf, origin, off, d, name):
        self.buf, self.origin, self.off, self.dtype, self.name = buf, origin, off, d, name

    shape = property(lambda self: tuple(np.shape(self.off)))

    def __add__(self, o):
        return _ptr_arith("add", self, o)

    __radd__ = __add__

    def __sub__(self, o):
        return _ptr_arith("sub", self, o)

    def __getitem__(self, key):
        return Pointer(self.buf, self.origin, np.asarray(self.off)[key], self.dtype, self.name)


def _ptr_arith(op, x, y):
    if isinstance(y, Pointer) and op == "add":
        x, y = y, x
    if not isinstance(x, Pointer) or isinstance(y, Pointer) or op not in ("add", "sub"):
        raise TypeError(f"pointer arithmetic supports ptr + int and ptr - int, not {op}")
    y, _ = _wrap(y)
    if y.dtype.kind == "f":
        raise TypeError("a pointer offset must be an integer")
    o = y.a.astype(np.int64)
    return Pointer(x.buf, x.origin, x.off + o if op == "add" else x.off - o, x.dtype, x.name)


def _where():
    f = sys._getframe(1)
    while f.f_back is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    line = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno}: {line}"


def _check(ptr, offs, mask, what):
    n = len(ptr.buf.raw)
    bad = (offs < 0) | (offs >= n)
    if mask is not None:
        bad &= mask
    if bad.any():
        k = np.argwhere(bad)[0]
        o = int(offs[tuple(k)]) - ptr.origin
        raise IndexError(f"{what}: out-of-bounds access to {ptr.name} at element offset {o} "
                         f"(the storage holds [{-ptr.origin}, {n - ptr.origin})) in program "
                         f"{_state.pid} at {_where()}")


def _mask_of(mask, shape):
    if mask is None:
        return None
    m, _ = _wrap(mask)
    return np.broadcast_to(m.a.astype(bool), shape)


def _to_compute(raw, d):
    if d is core.bfloat16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if d is core.float16:
        return raw.astype(np.float32)
    return raw.astype(_NP[d.name])


def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    if not isinstance(pointer, Pointer):
        raise TypeError("tl.load needs a pointer (a tensor argument plus offsets)")
    d = pointer.dtype
    shapes = [np.shape(pointer.off)]
    if mask is not None:
        shapes.append(_wrap(mask)[0].shape)
    if other is not None:
        shapes.append(_wrap(other)[0].shape)
    shape = np.broadcast_shapes(*shapes)
    offs = np.broadcast_to(np.asarray(pointer.off + pointer.origin, dtype=np.int64), shape)
    m = _mask_of(mask, shape)
    _check(pointer, offs, m, "tl.load")
    safe = offs if m is None else np.where(m, offs, 0)
    vals = _to_compute(pointer.buf.raw[np.clip(safe, 0, builtins.max(len(pointer.buf.raw) - 1, 0))], d)
    if m is not None:
        if other is not None:
            o, _ = _wrap(other)
            fill = _round(np.broadcast_to(o.a, shape).astype(_NP[d.name]), d)
        else:
            fill = np.full(shape, np.nan if d.kind == "f" else 0, dtype=_NP[d.name])
        vals = np.where(m, vals, fill)
    return Block(np.array(vals, dtype=_NP[d.name]), d)


def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    if not isinstance(pointer, Pointer):
        raise TypeError("tl.store needs a pointer (a tensor argument plus offsets)")
    d = pointer.dtype
    v, _ = _wrap(value)
    shape = np.broadcast_shapes(np.shape(pointer.off), v.shape, *([_wrap(mask)[0].shape] if mask is not None else []))
    offs = np.broadcast_to(np.asarray(pointer.off + pointer.origin, dtype=np.int64), shape)
    m = _mask_of(mask, shape)
    _check(pointer, offs, m, "tl.store")
    vals = np.broadcast_to(v.a, shape)
    if d is core.bfloat16:
        raw = (_round(vals.astype(np.float32), d).view(np.uint32) >> 16).astype(np.uint16)
    else:
        raw = vals.astype(pointer.buf.raw.dtype)
    if m is not None:
        offs, raw = offs[m], raw[m]
    pointer.buf.raw[offs.reshape(-1)] = raw.reshape(-1)
    pointer.buf.dirty = True


def program_id(axis):
    return Block(np.int32(_state.pid[axis]), core.int32)


def num_programs(axis):
    return Block(np.int32(_state.grid[axis]), core.int32)


def arange(start, end):
    start, end = int(start), int(end)
    return Block(np.arange(start, end, dtype=np.int32), core.int32)


def _shape(shape):
    if isinstance(shape, core.constexpr):
        shape = shape.value
    return tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else [shape]))


def full(shape, value, dtype):
    v = value.a if isinstance(value, Block) else value
    return Block(_round(np.full(_shape(shape), v, dtype=_NP[dtype.name]), dtype), dtype)


def zeros(shape, dtype=core.float32):
    return full(shape, 0, dtype)


def zeros_like(x):
    return zeros(x.shape, x.dtype)


def cast(x, dtype, fp_downcast_rounding=None, bitcast=False):
    x, _ = _wrap(x)
    with np.errstate(all="ignore"):
        a = x.a
        if dtype.kind == "b":
            return Block(a != 0, dtype)
        if dtype.kind in "iu" and x.dtype.kind == "f":
            a = np.trunc(np.nan_to_num(a))
        return Block(_round(a.astype(_NP[dtype.name]), dtype), dtype)


def where(condition, x, y):
    c, _ = _wrap(condition)
    x, xw = _wrap(x)
    y, yw = _wrap(y)
    d = core.promote(x.dtype, y.dtype, xw, yw)
    return Block(np.where(c.a.astype(bool), x.a.astype(_NP[d.name]), y.a.astype(_NP[d.name])), d)


def _unary(fn, name):
    def f(x, *args, **kwargs):
        x, _ = _wrap(x)
        d = x.dtype if x.dtype.kind == "f" else core.float32
        with np.errstate(all="ignore"):
            return Block(_round(fn(x.a.astype(_NP[d.name])), d), d)
    f.__name__ = name
    return f


exp = _unary(np.exp, "exp")
exp2 = _unary(np.exp2, "exp2")
log = _unary(np.log, "log")
log2 = _unary(np.log2, "log2")
sqrt = _unary(np.sqrt, "sqrt")
sqrt_rn = sqrt
rsqrt = _unary(lambda a: 1 / np.sqrt(a), "rsqrt")
sigmoid = _unary(lambda a: 1 / (1 + np.exp(-a)), "sigmoid")
sin = _unary(np.sin, "sin")
cos = _unary(np.cos, "cos")
floor = _unary(np.floor, "floor")
ceil = _unary(np.ceil, "ceil")


def erf(x):
    x, _ = _wrap(x)
    t = torch.erf(torch.from_numpy(np.asarray(x.a, dtype=np.float32))).numpy()
    return Block(_round(t, x.dtype if x.dtype.kind == "f" else core.float32), x.dtype if x.dtype.kind == "f" else core.float32)


def abs(x):
    x, _ = _wrap(x)
    return Block(np.abs(x.a), x.dtype)


def maximum(x, y, propagate_nan=None):
    return _binary("maximum", x, y)


def minimum(x, y, propagate_nan=None):
    return _binary("minimum", x, y)


def fma(x, y, z):
    return x * y + z


def cdiv(x, div):
    if isinstance(x, Block) or isinstance(div, Block):
        return (x + div - 1) // div
    return core.cdiv(x, div)


def _reduce(x, axis, op, keep_dims):
    x, _ = _wrap(x)
    if isinstance(axis, core.constexpr):
        axis = axis.value
    d = core.reduce_dtype(x.dtype, op) if op in ("sum", "max", "min") else x.dtype
    a = x.a.astype(_NP[d.name])
    with np.errstate(all="ignore"):
        if op == "sum":
            r = np.sum(a, axis=axis, keepdims=keep_dims)
        elif op == "max":
            r = np.max(a, axis=axis, keepdims=keep_dims)
        elif op == "min":
            r = np.min(a, axis=axis, keepdims=keep_dims)
        else:
            fn = np.argmax if op == "argmax" else np.argmin
            r = fn(a, axis=axis, keepdims=keep_dims).astype(np.int32)
            return Block(r, core.int32)
    return Block(_round(r, d), d)


def sum(input, axis=None, keep_dims=False, dtype=None):
    r = _reduce(input, axis, "sum", keep_dims)
    return cast(r, dtype) if dtype is not None else r


def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    r = _reduce(input, axis, "max", keep_dims)
    return (r, _reduce(input, axis, "argmax", keep_dims)) if return_indices else r


def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    r = _reduce(input, axis, "min", keep_dims)
    return (r, _reduce(input, axis, "argmin", keep_dims)) if return_indices else r


def argmax(input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(input, axis, "argmax", keep_dims)


def argmin(input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(input, axis, "argmin", keep_dims)


def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=core.float32):
    a, _ = _wrap(input)
    b, _ = _wrap(other)
    if a.a.ndim != 2 or b.a.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tl.dot: shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    r = a.a.astype(np.float32) @ b.a.astype(np.float32)
    if acc is not None:
        acc, _ = _wrap(acc)
        return Block(_round(acc.a.astype(np.float32) + r, acc.dtype), acc.dtype)
    return Block(_round(r.astype(np.float32), out_dtype), out_dtype)


def trans(input, *dims):
    x, _ = _wrap(input)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return Block(np.transpose(x.a, dims or None), x.dtype)


permute = trans


def broadcast_to(input, *shape):
    x, _ = _wrap(input)
    return Block(np.broadcast_to(x.a, _shape(shape[0] if len(shape) == 1 else shape)).copy(), x.dtype)


def expand_dims(input, axis):
    x, _ = _wrap(input)
    return Block(np.expand_dims(x.a, axis), x.dtype)


def reshape(input, *shape, can_reorder=False):
    x, _ = _wrap(input)
    return Block(x.a.reshape(_shape(shape[0] if len(shape) == 1 else shape)), x.dtype)


view = reshape


def multiple_of(x, values):
    return x


max_contiguous = max_constancy = multiple_of


def assume(cond):
    pass


def debug_barrier():
    pass


def static_print(*args, **kwargs):
    print(*args, **kwargs)


def device_print(prefix, *args, **kwargs):
    print(prefix, *[a.a if isinstance(a, Block) else a for a in args])


def device_assert(cond, msg=""):
    c, _ = _wrap(cond)
    if not np.all(c.a):
        raise AssertionError(f"tl.device_assert: {msg} at {_where()}")


def static_assert(cond, msg=""):
    if not cond:
        raise AssertionError(f"tl.static_assert: {msg}")


def static_range(*args):
    return builtins.range(*[int(a) for a in args])


def range(*args, num_stages=None, loop_unroll_factor=None, **kwargs):
    return builtins.range(*[int(a) for a in args])


def run(fn, grid, params, values, specs):
    """Runs `fn` once per program of `grid` on CPU copies of the tensor
    arguments, then writes back what was stored."""
    buffers = {}
    args = []
    for name, v, spec in zip(params, values, specs):
        if spec[0] == "tensor":
            key = (v.untyped_storage().data_ptr(), v.device, v.dtype)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = Buffer(v, name)
            args.append(Pointer(buf, v.storage_offset(), np.int64(0), spec[1], name))
        elif spec[0] in ("int", "float"):
            args.append(Block(np.asarray(v, dtype=_NP[spec[1].name]), spec[1]))
        else:
            args.append(spec[1])
    _state.grid = grid
    try:
        for z, y, x in itertools.product(*(builtins.range(g) for g in reversed(grid))):
            _state.pid = (x, y, z)
            fn(*args)
    finally:
        _state.pid = None
        for buf in buffers.values():
            buf.write_back()
