"""FX (an ATen graph after AOTAutograd) -> the graph IR (ir.py).

Each call_function node goes through the table of :data:`HANDLERS` (by
overload packet); a handler builds Pointwise and Reduce nodes, or returns
None, and the node then runs as a :class:`~.ir.Library` node, the ATen op
loom eager runs. So is everything on a device other than loom, every dtype
without a compute kind (complex) and every op with no handler: lowering
never fails for coverage.

Views whose dims each follow one dim of their base (permute, expand,
unsqueeze, squeeze, and views or reshapes that only insert or drop size-1
dims) are Library nodes carrying a dimmap: pointwise operands and
reductions read through them straight from the base, so that a view
between two fused ops never forces its base into memory. Constants made by
``full``/``scalar_tensor``/``*_like`` fills become literals in the ops
that read them.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as PROMO
from torch._prims_common import elementwise_dtypes

from . import ir
from .ir import F64, I64, Library, Pointwise, Reduce, Ref, Scalar, Value

aten = torch.ops.aten
prims = torch.ops.prims

LOOM = "loom"


class Unsupported(Exception):
    """Raised inside a handler: the node runs as a Library node."""


def bind(target, args, kwargs):
    """The op's arguments by schema name (defaults filled in)."""
    out = {}
    for i, a in enumerate(target._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


class Lowering:
    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.graph = ir.Graph()
        self.env = {}
        self.handled = 0
        self.library = 0

    # ---- values ----------------------------------------------------------------

    def value_of(self, fake, name=None) -> Value | None:
        if not isinstance(fake, torch.Tensor):
            return None
        stride = fake.stride() if fake.layout == torch.strided else None
        return Value(fake.shape, fake.dtype, stride, fake.device, name)

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(v) for k, v in a.items()}
        return a

    def operand(self, v, out_rank, access=None) -> Ref | Scalar:
        """`v` (a Value or a number) as an operand of an output of
        `out_rank` dims, broadcast, through views and constants."""
        if not isinstance(v, Value):
            if isinstance(v, (bool, int, float)):
                return Scalar(v)
            raise Unsupported(f"operand {v!r}")
        access = ir.broadcast_access(v.shape, out_rank) if access is None else access
        while True:
            p = v.producer
            if isinstance(p, Library) and p.const is not None:
                return Scalar(p.const)
            if not (isinstance(p, Library) and p.view is not None):
                break
            base, dimmap = p.view
            new = [None] * len(base.shape)
            for j, i in enumerate(dimmap):
                if i is not None:
                    new[i] = access[j]
            v, access = base, tuple(new)
        self.check_value(v, operand=True)
        return Ref(v, tuple(access))

    def check_value(self, v: Value, operand=False):
        """Kernels compute loom tensors from loom tensors, and read 0-dim
        CPU tensors (as eager does: a scalar) as scalar arguments."""
        cpu_scalar = operand and v.device is not None and v.device.type == "cpu" and v.shape == ()
        if v.device is None or (v.device.type != LOOM and not cpu_scalar) or \
                v.dtype not in ir.DTYPES or v.numel == 0:
            raise Unsupported(f"value {v!r} on {v.device}")

    # ---- node builders ---------------------------------------------------------

    def pointwise(self, op, operands, kind, out: Value | tuple, params=()) -> Value:
        if isinstance(out, tuple):  # (shape, dtype): an internal value
            shape, dtype = out
            out = Value(shape, dtype, ir.contiguous_strides(shape), torch.device(LOOM))
        rank = len(out.shape)
        ops = [o if isinstance(o, (Ref, Scalar)) else self.operand(o, rank) for o in operands]
        self.check_value(out)
        if kind == I64 and any(isinstance(c, float) and not c.is_integer() for c in
                               [o.value for o in ops if isinstance(o, Scalar)] + list(params)):
            raise Unsupported("a fractional constant in integer arithmetic")
        node = Pointwise(op, ops, kind, tuple(params), outputs=[out])
        self.graph.add(node)
        return out

    def reduce(self, op, x: Value, dims, keepdim, dtype) -> Value:
        rank = len(x.shape)
        dims = tuple(sorted(d % rank for d in dims)) if dims else tuple(range(rank))
        shape = tuple(1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims)
        out = Value(shape, dtype, ir.contiguous_strides(shape), x.device)
        if all(x.shape[d] == 1 for d in dims):  # nothing to fold: a copy
            access, pos = [], 0
            for d in range(rank):
                access.append(None if d in dims else pos)
                pos += 1 if keepdim or d not in dims else 0
            src = self.operand(x, len(shape), access=tuple(access))
            return self.pointwise("identity", [src], ir.kind_of(x.dtype), out)
        self.check_value(out)
        operand = self.operand(x, rank, access=tuple(range(rank)))
        if isinstance(operand, Scalar) or operand.value.device.type != LOOM:
            raise Unsupported("reduction of a constant")
        node = Reduce(op, operand, dims, bool(keepdim), outputs=[out])
        self.graph.add(node)
        return out

    def convert(self, x, out: Value | tuple) -> Value:
        kind = ir.kind_of(x.dtype) if isinstance(x, Value) else F64
        return self.pointwise("identity", [x], kind, out)

    # ---- the walk ----------------------------------------------------------------

    def run(self) -> ir.Graph:
        from .ops import HANDLERS

        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                v = self.value_of(node.meta.get("val"), node.name)
                idx = len(self.graph.inputs)
                n = ir.Input(idx, outputs=[v] if v is not None else [])
                if v is not None:
                    self.graph.add(n)
                self.graph.inputs.append(v)
                self.env[node] = v if v is not None else node.meta.get("val")
            elif node.op == "output":
                outs = node.args[0]
                self.graph.outputs = [self.env[o] if isinstance(o, torch.fx.Node) else None
                                      for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
            elif node.op == "call_function" and node.target is operator.getitem:
                src, i = node.args
                self.env[node] = self.env[src][i]
            elif node.op == "call_function" and _concrete_number(node.meta.get("val")):
                # a size computed from the inputs' sizes (a graph with symbolic
                # sizes, propagated with concrete ones): a constant here
                self.env[node] = node.meta["val"]
            elif node.op == "call_function":
                self.env[node] = self.lower_call(node, HANDLERS)
            elif node.op == "get_attr":
                obj = self.gm
                for part in node.target.split("."):
                    obj = getattr(obj, part)
                v = self.value_of(obj, node.name) if isinstance(obj, torch.Tensor) else None
                if v is not None:
                    self.graph.add(ir.Constant(obj, outputs=[v]))
                self.env[node] = v if v is not None else obj
            else:
                raise NotImplementedError(f"loom compiler: FX node {node.op} {node.target}")
        self.eliminate_dead()
        return self.graph

    def lower_call(self, node, handlers):
        args, kwargs = self.arg(node.args), self.arg(node.kwargs)
        target = node.target
        schema = getattr(target, "_schema", None)
        handler = handlers.get(getattr(target, "overloadpacket", None)) or \
            handlers.get(schema.name if schema is not None else None)
        if handler is not None:
            mark = len(self.graph.nodes)
            try:
                result = handler(self, target, node, bind(target, args, kwargs))
            except Unsupported:
                result = None
            if result is not None:
                self.handled += 1
                origin = Origin(target, args, kwargs, result, tuple(self.graph.nodes[mark:]))
                for n in origin.nodes:
                    n.origin = origin
                return result
            del self.graph.nodes[mark:]  # a partial lowering leaves nothing behind
            self.graph.relink()
        self.library += 1
        return self.library_node(node, target, args, kwargs)

    def library_node(self, node, target, args, kwargs):
        fake = node.meta.get("val")
        if target is WITH_EFFECTS:
            target = with_effects
        multi = isinstance(fake, (tuple, list))
        outs = [self.value_of(f, f"{node.name}_{i}") for i, f in enumerate(fake)] if multi \
            else [self.value_of(fake, node.name)]
        lib = Library(target, tuple(args), dict(kwargs), outputs=[o for o in outs if o is not None],
                      multi=multi)
        lib.slots = outs
        lib.const = None
        from .ops import view_dimmap, constant_of

        if not multi and outs[0] is not None:
            dimmap = view_dimmap(target, args, kwargs, outs[0])
            lib.view = (args[0], dimmap) if dimmap is not None else None
            lib.const = constant_of(target, bind(target, args, kwargs), outs[0]) \
                if hasattr(target, "_schema") else None
        self.graph.add(lib)
        return tuple(outs) if multi else outs[0]

    def eliminate_dead(self):
        live = {v for v in self.graph.outputs if v is not None}
        keep = []
        for n in reversed(self.graph.nodes):
            side_effect = isinstance(n, Library) and (
                not hasattr(n.target, "_schema") or n.target._schema.is_mutable)
            writes = any(v.alias is not None for v in n.outputs)
            if isinstance(n, (ir.Input, ir.Constant)) or side_effect or writes or \
                    any(v in live for v in n.outputs):
                keep.append(n)
                live.update(n.inputs)
        self.graph.nodes = keep[::-1]
        self.graph.relink()


class Origin:
    """The ATen call a handler lowered to `nodes` (Pointwise and Reduce
    nodes): a kernel made of all of them and nothing else can run the call
    itself (fuse.library_singles)."""

    def __init__(self, target, args, kwargs, result, nodes):
        self.target, self.args, self.kwargs = target, args, kwargs
        self.result, self.nodes = result, nodes


WITH_EFFECTS = getattr(torch.ops.higher_order, "with_effects", None)


def with_effects(token, op, *args, **kwargs):
    """An effectful op (a linalg error check) threaded through an effect
    token, as the graph orders it: the op called directly, the token passed
    on (tokens carry no data; the HOP's own call costs about 25 us more)."""
    out = op(*args, **kwargs)
    if isinstance(out, tuple):
        return (token, *out)
    return (token, out)


def _concrete_number(val) -> bool:
    return isinstance(val, (bool, int, float)) and not isinstance(val, torch.Tensor)


def lower(gm: torch.fx.GraphModule) -> tuple[ir.Graph, Lowering]:
    low = Lowering(gm)
    return low.run(), low


# ---- helpers for handlers ---------------------------------------------------------

def compute_kind(*args, promotion=PROMO.DEFAULT) -> str:
    """The compute kind eager uses for an op over `args` (Values stand for
    tensors of their shape and dtype)."""
    metas = [torch.empty(a.shape, dtype=a.dtype, device="meta") if isinstance(a, Value) else a
             for a in args if a is not None]
    compute, _ = elementwise_dtypes(*metas, type_promotion_kind=promotion)
    return ir.kind_of(compute)


def count_of(x: Value, dims) -> int:
    dims = [d % len(x.shape) for d in dims] if dims else range(len(x.shape))
    return math.prod(x.shape[d] for d in dims)


__all__ = ["lower", "Lowering", "Unsupported", "bind", "compute_kind", "count_of", "F64", "I64",
           "aten", "prims"]
