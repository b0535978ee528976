"""The fusion IR: what the ``loom`` compile backend, adaptive eager and the
kernel interface share between a graph and the code of its kernels.

Two levels, both plain data:

- **The graph IR** (:class:`Graph`): values with their shape, dtype and
  layout, made by nodes of three kinds. :class:`Pointwise` nodes compute
  one element of their output from one element of each operand (an
  operand reaches its value through an *access*: for each of its dims, the
  output dim it follows, or None where it is broadcast, so broadcasting and
  the views that only permute, insert, drop or broadcast size-1 dims cost
  nothing). :class:`Reduce` nodes fold the trailing or inner dims of their
  operand. :class:`Library` nodes run an ATen op as loom eager does
  (everything the lowering does not handle, views and graph glue
  included): compiling never fails for coverage.
- **The kernel IR** (:class:`LoopKernel`): one fused kernel as loops and
  SSA statements. Its iteration space is ``dims`` (every size > 1), whose
  first ``n_outer`` dims are the parallel *outer* space O and the rest the
  reduced space R; a statement is either per element of the full space F =
  O x R or per element of O. Passes over R compute the reductions whose
  operands need results of earlier passes (a softmax: the maximum, then the
  sum of exponentials, then the output). Tensor arguments are read and
  written through a *dimmap*: for each tensor dim, the kernel dim it
  follows or None.

Neither level knows any target language: the emitters (``emit.py`` and its
dialects) turn a :class:`LoopKernel` into source.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

# ---- dtypes and compute kinds -------------------------------------------------

#: The arithmetic a value is held in: float32, float16 and bfloat16 values
#: in float (rounded to their dtype wherever eager materializes them),
#: float64 in double, integers and bool in int64 (as the library does).
F32, F64, I64 = "f32", "f64", "i64"

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
DTYPES = FLOAT_DTYPES + (torch.float64,) + INT_DTYPES


def kind_of(dtype: torch.dtype) -> str:
    if dtype in FLOAT_DTYPES:
        return F32
    if dtype == torch.float64:
        return F64
    if dtype in INT_DTYPES:
        return I64
    raise TypeError(f"loom compiler: no compute kind for {dtype}")


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a sum of `dtype` accumulates in (the library's: double for
    floating types, int64 for the others)."""
    return torch.float64 if dtype.is_floating_point else torch.int64


# ---- the graph IR -----------------------------------------------------------

class Value:
    """A tensor of the graph: shape, dtype, device and (when it is
    materialized) the strides eager would give it."""

    __slots__ = ("id", "shape", "dtype", "stride", "device", "producer", "users", "name", "alias")
    _ids = itertools.count()

    def __init__(self, shape, dtype, stride=None, device=None, name=None):
        self.id = next(Value._ids)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.stride = tuple(int(s) for s in stride) if stride is not None else None
        self.device = device
        self.producer = None
        self.users = []
        self.name = name or f"v{self.id}"
        #: The graph input this value is written into (an in-place update
        #: the graph ends with: copy_(input, value)), or None.
        self.alias = None

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return f"%{self.name}:{str(self.dtype).replace('torch.', '')}{list(self.shape)}"


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def broadcast_access(value_shape, out_rank):
    """The access of an operand broadcast to an output of `out_rank` dims
    (aligned on the right; size-1 dims follow nothing)."""
    off = out_rank - len(value_shape)
    return tuple(None if s == 1 else off + j for j, s in enumerate(value_shape))


@dataclass(eq=False)
class Ref:
    """An operand: `value` read at the element whose index, for each of
    value's dims j, is the output's index in dim access[j] (0 where None)."""
    value: Value
    access: tuple


@dataclass(eq=False)
class Scalar:
    """A constant operand, in the compute kind of the op that reads it."""
    value: float | int | bool


class Node:
    outputs: list

    @property
    def inputs(self):
        return []

    @property
    def out(self) -> Value:
        return self.outputs[0]


@dataclass(eq=False)
class Input(Node):
    index: int
    outputs: list = field(default_factory=list)


@dataclass(eq=False)
class Constant(Node):
    """A tensor the graph holds (an FX get_attr): read like an input."""
    tensor: object
    outputs: list = field(default_factory=list)


@dataclass(eq=False)
class Pointwise(Node):
    """out[i] = op(operands[k][access_k(i)]...) computed in `kind` and
    rounded to out's dtype. `params` are op parameters (numbers)."""
    op: str
    operands: list
    kind: str
    params: tuple = ()
    outputs: list = field(default_factory=list)

    @property
    def inputs(self):
        return [o.value for o in self.operands if isinstance(o, Ref)]


@dataclass(eq=False)
class Reduce(Node):
    """out = fold of `op` ("sum", "max", "min") over `dims` of the operand
    (accessed with the identity), out's shape keeps size-1 dims where the
    operand's reduced dims were when `keepdim`. Sums accumulate in
    acc_dtype (out's dtype); max and min keep the operand's dtype."""
    op: str
    operand: Ref
    dims: tuple
    keepdim: bool
    outputs: list = field(default_factory=list)

    @property
    def inputs(self):
        return [self.operand.value]


@dataclass(eq=False)
class Library(Node):
    """`target(*args, **kwargs)` as loom eager runs it; Values in args and
    kwargs (also inside lists) are the op's tensor arguments. `view` is
    (base, dimmap) when the op is a view whose dims each follow one dim of
    base (or none, size 1): readers in kernels then read base directly."""
    target: object
    args: tuple
    kwargs: dict
    outputs: list = field(default_factory=list)
    multi: bool = False   # the op returns a tuple/list (outputs by getitem)
    view: tuple | None = None

    @property
    def inputs(self):
        found = []

        def walk(a):
            if isinstance(a, Value):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    walk(x)
        walk(self.args)
        walk(tuple(self.kwargs.values()))
        return found


class Graph:
    """Nodes in a topological order, the inputs (placeholders, by
    position) and the outputs (Values, or None)."""

    def __init__(self):
        self.nodes = []
        self.inputs = []
        self.outputs = []

    def add(self, node: Node) -> Node:
        for v in node.outputs:
            v.producer = node
        for v in node.inputs:
            v.users.append(node)
        self.nodes.append(node)
        return node

    def relink(self):
        """Recomputes users after nodes were rewritten or dropped."""
        for n in self.nodes:
            for v in n.outputs:
                v.users = []
        for n in self.nodes:
            for v in n.inputs:
                if n not in v.users:
                    v.users.append(n)

    def __str__(self):
        lines = []
        for n in self.nodes:
            outs = ", ".join(map(repr, n.outputs))
            if isinstance(n, Pointwise):
                ops = ", ".join(repr(o.value) + str(list(o.access)) if isinstance(o, Ref) else repr(o.value)
                                for o in n.operands)
                lines.append(f"{outs} = {n.op}[{n.kind}]({ops}){list(n.params) if n.params else ''}")
            elif isinstance(n, Reduce):
                lines.append(f"{outs} = reduce_{n.op}({n.operand.value!r}, dims={list(n.dims)})")
            elif isinstance(n, Library):
                lines.append(f"{outs} = library {n.target}")
            elif isinstance(n, Constant):
                lines.append(f"{outs} = constant")
            else:
                lines.append(f"{outs} = input {n.index}")
        lines.append("return " + ", ".join(repr(v) for v in self.outputs))
        return "\n".join(lines)


# ---- the kernel IR ------------------------------------------------------------

@dataclass
class Arg:
    """A tensor argument: its dtype, rank, and for each of its dims the
    kernel dim it follows (None: size 1, or broadcast)."""
    dtype: torch.dtype
    dimmap: tuple
    output: bool


@dataclass
class Load:
    dst: int
    arg: int


@dataclass
class LoadScalar:
    """dst = scalar argument `index` (a 0-dim CPU tensor's value)."""
    dst: int
    index: int


@dataclass
class Op:
    """dst = op(srcs) in `kind`, rounded to `dtype`. A src is an int (an
    SSA id) or a Scalar."""
    dst: int
    op: str
    kind: str
    srcs: tuple
    dtype: torch.dtype
    params: tuple = ()


@dataclass
class Store:
    arg: int
    src: int


@dataclass
class Accumulate:
    """dst = fold of `op` over R of src (an F-space id) in `kind`."""
    dst: int
    op: str
    src: int
    kind: str
    dtype: torch.dtype


@dataclass
class Pass:
    """One sweep over R for each outer index: `body` per element of R
    (loads, ops, stores), `accumulate` the reductions fed by it, then
    `after` per outer index (O-space loads, ops and stores)."""
    body: list = field(default_factory=list)
    accumulate: list = field(default_factory=list)
    after: list = field(default_factory=list)


@dataclass
class LoopKernel:
    """A fused kernel. A pointwise kernel (no reductions) has n_outer ==
    len(dims), `before` holding only what no element changes (scalar
    arguments), and one pass whose body is per element; a reduction kernel
    runs `before` (O-space statements) and then its passes for each outer
    index. `types` gives each SSA id's dtype (its value is held in the
    kind of that dtype)."""
    name: str
    dims: tuple
    n_outer: int
    args: list
    before: list
    passes: list
    types: dict
    ops: int = 0            # graph ops fused into it (for counters and logs)
    summary: str = ""
    aliased: bool = False   # an output is also an input's memory (in-place update)
    scalars: list = field(default_factory=list)  # dtypes of the scalar arguments

    @property
    def outer_numel(self) -> int:
        n = 1
        for s in self.dims[: self.n_outer]:
            n *= s
        return n

    @property
    def inner_numel(self) -> int:
        n = 1
        for s in self.dims[self.n_outer:]:
            n *= s
        return n

    @property
    def is_pointwise(self) -> bool:
        return not any(p.accumulate for p in self.passes)
