"""The types of the tile language: dtypes (``tl.float32`` ...), ``constexpr``
and Triton's promotion rules, shared by the compiler and the interpreter so
both give a kernel the same types."""

from __future__ import annotations

import torch


class dtype:
    """An element type of blocks and pointers (``tl.float32`` ...)."""

    def __init__(self, name, bits, kind, torch_dtype, ctype):
        self.name = name
        self.bits = bits
        self.kind = kind            # "f" float, "i" signed int, "u" unsigned int, "b" bool
        self.torch = torch_dtype
        #: the C type values of this dtype are computed in (float16 and
        #: bfloat16 in float, rounded to their dtype after every op)
        self.ctype = ctype

    def is_floating(self):
        return self.kind == "f"

    def is_int(self):
        return self.kind in "iub"

    def is_bool(self):
        return self.kind == "b"

    def __repr__(self):
        return f"tl.{self.name}"

    def __reduce__(self):
        return self.name


float16 = dtype("float16", 16, "f", torch.float16, "float")
bfloat16 = dtype("bfloat16", 16, "f", torch.bfloat16, "float")
float32 = dtype("float32", 32, "f", torch.float32, "float")
float64 = dtype("float64", 64, "f", torch.float64, "double")
int1 = dtype("int1", 1, "b", torch.bool, "uint8_t")
int8 = dtype("int8", 8, "i", torch.int8, "int8_t")
int16 = dtype("int16", 16, "i", torch.int16, "int16_t")
int32 = dtype("int32", 32, "i", torch.int32, "int32_t")
int64 = dtype("int64", 64, "i", torch.int64, "int64_t")
uint8 = dtype("uint8", 8, "u", torch.uint8, "uint8_t")
# Triton's short names
fp16, bf16, fp32, fp64 = float16, bfloat16, float32, float64

ALL = (float16, bfloat16, float32, float64, int1, int8, int16, int32, int64, uint8)
BY_TORCH = {d.torch: d for d in ALL}
BY_NAME = {d.name: d for d in ALL}


def from_torch(t):
    d = BY_TORCH.get(t)
    if d is None:
        raise TypeError(f"torch_loom.tile: tensors of dtype {t} are not supported "
                        f"(supported: {', '.join(str(x.torch) for x in ALL)})")
    return d


class constexpr:
    """Marks a kernel parameter whose value is fixed when the kernel is
    specialised (``BLOCK: tl.constexpr``); wraps a value in the interpreter."""

    def __init__(self, value=None):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr({self.value!r})"

    def __index__(self):
        return self.value

    def __int__(self):
        return int(self.value)

    def __bool__(self):
        return bool(self.value)


def scalar_dtype(value):
    """The dtype a Python scalar takes in a kernel (Triton's rules)."""
    if isinstance(value, bool):
        return int1
    if isinstance(value, int):
        return int32 if -2**31 <= value < 2**31 else int64
    if isinstance(value, float):
        return float32
    raise TypeError(f"torch_loom.tile: {type(value).__name__} is not a kernel scalar")


def promote(a, b, a_weak=False, b_weak=False, div=False):
    """The dtype of a binary op's result in Triton's semantics. A weak
    operand is a Python literal: it takes the other operand's type of its
    kind. ``div``: true division (integers give float32)."""
    if a_weak and not b_weak:
        a = _weak(a, b)
    elif b_weak and not a_weak:
        b = _weak(b, a)
    if a.kind == "f" or b.kind == "f":
        if div and (a.kind != "f" or b.kind != "f"):
            return a if a.kind == "f" else b
        if a.kind != "f":
            return b
        if b.kind != "f":
            return a
        if a is b:
            return a
        if float64 in (a, b):
            return float64
        return float32
    if div:
        return float32
    if a.kind == "b" and b.kind == "b":
        return int1
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    if a.kind != b.kind:
        return a if a.kind == "u" else b
    return a


def _weak(lit, other):
    if lit.kind == "f":
        return other if other.kind == "f" else float32
    if lit.kind == "b":
        return other
    if other.kind == "f":
        return other
    if other.kind == "b":
        return lit
    return other if other.bits >= lit.bits else lit


def reduce_dtype(d, op):
    """The result dtype of tl.sum/max/min over a block of `d`: sums of
    small ints give int32, of float16/bfloat16 float32."""
    if op == "sum":
        if d.kind == "f" and d.bits < 32:
            return float32
        if d.kind in "iub" and d.bits < 32:
            return int32
    return d


def next_power_of_2(n):
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a, b):
    return (a + b - 1) // b
