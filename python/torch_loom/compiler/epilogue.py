"""GEMM epilogues: a matrix product (``mm``, ``addmm`` with beta = alpha = 1)
followed by elementwise ops on its result (a bias, an activation, a
residual add, an activation's backward form (a ReLU's: threshold_backward
at 0), a final cast) becomes one
library call, ``loom::mm_epilogue``, whose GEMM applies those ops to each
output tile while it is in cache (``loom/kernels/gemm_epilogue.h``). The
ops run with the pointwise library's element functions and eager's
roundings, so the result keeps eager's bits.

The pass runs on the graph IR before fusion. From the product's result it
follows a chain of pointwise nodes over the product's shape (through views
that only split its rows, as a linear layer over [batch, seq, features]
has them), each reading the previous value with the identity access and
at most one other tensor that broadcasts to the product's shape and exists
before the product runs. The chain stops at a value something else reads;
the product's own result stays available (``keep_product``) when another
node reads it (a backward saving a linear layer's pre-activation).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

from . import ir, jit
from .ir import Library, Pointwise, Ref, Value

aten = torch.ops.aten

UNARY = ("identity", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "neg", "exp")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "gelu_backward",
          "gelu_tanh_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
          "threshold_backward")
#: Binary ops whose value must be their first input (the gradient).
FIRST_ONLY = ("gelu_backward", "gelu_tanh_backward", "silu_backward", "sigmoid_backward",
              "tanh_backward", "threshold_backward")
#: Whether products take their elementwise chains (off: each op runs as
#: the lowering has it; for measuring the fusion's worth).
ENABLED = True
MAX_STEPS = 8
OPERAND_SHIFT = 16
SWAP = 1 << 30

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


@functools.cache
def pw_ops() -> dict:
    """loom_pw_op's values by lower-case name, read from the kernel
    contract's header (include/loom/kernels/pointwise.h)."""
    text = (Path(jit.include_dir()) / "loom" / "kernels" / "pointwise.h").read_text()
    body = text[text.index("typedef enum loom_pw_op"):text.index("LOOM_PW_OP_COUNT")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = re.findall(r"\bLOOM_PW_([A-Z0-9_]+)\b", body)
    return {n.lower(): i for i, n in enumerate(names)}


@functools.cache
def _op():
    import torch_loom  # noqa: F401  (the op is registered by the extension)

    return torch.ops.loom.mm_epilogue.default


def _product(n):
    """(a, b, bias) of a product the epilogue can take, or None."""
    if not isinstance(n, Library):
        return None
    if n.target is aten.mm.default and len(n.args) == 2 and not n.kwargs:
        a, b = n.args
        bias = None
    elif n.target is aten.addmm.default and len(n.args) == 3 and not n.kwargs:
        bias, a, b = n.args
        if not isinstance(bias, Value) or bias.dtype != a.dtype or len(bias.shape) > 2:
            return None
    else:
        return None
    c = n.out
    for v in (a, b, c):
        if not isinstance(v, Value) or v.device is None or v.device.type != "loom" or \
                v.dtype not in ir.FLOAT_DTYPES or len(v.shape) != 2 or v.numel == 0:
            return None
    if a.dtype != b.dtype or c.dtype != a.dtype:
        return None
    return a, b, bias


def _split_rows(view, value):
    """Whether Library `view` reads `value` as its rows split into leading
    dims (the last dim kept)."""
    return (isinstance(view, Library) and view.target in _VIEWS and view.args and
            view.args[0] is value and not view.multi and len(view.out.shape) >= 2 and
            view.out.shape[-1] == value.shape[-1] and view.out.numel == value.numel and
            value.stride == ir.contiguous_strides(value.shape))


def _relu_gradient(n) -> bool:
    """Whether pointwise n is threshold_backward at threshold 0 (a ReLU's
    gradient, the only threshold the epilogue's step takes)."""
    return n.op == "threshold_backward" and len(n.params) == 1 and \
        isinstance(n.params[0], (int, float)) and n.params[0] == 0


def _step(n, cur, shape, product):
    """(word-to-be, operand Value or None) of pointwise n over `cur`, or None."""
    if not isinstance(n, Pointwise) or n.out.alias is not None or n.kind != ir.F32 or \
            (n.params and not _relu_gradient(n)) or tuple(n.out.shape) != shape:
        return None
    identity = tuple(range(len(shape)))
    ops = n.operands
    if not all(isinstance(o, Ref) for o in ops):
        return None
    mine = [i for i, o in enumerate(ops) if o.value is cur and tuple(o.access) == identity]
    if n.op in UNARY and len(ops) == 1 and mine == [0]:
        return (n.op, None, False), None
    if n.op not in BINARY or len(ops) != 2 or len(mine) != 1:
        return None
    i = mine[0]
    if n.op in FIRST_ONLY and i != 0:
        return None
    other = ops[1 - i].value
    if other is cur or other.device is None or other.device.type != "loom" or \
            other.dtype not in ir.FLOAT_DTYPES or other.numel == 0 or \
            tuple(ops[1 - i].access) != ir.broadcast_access(other.shape, len(shape)):
        return None
    if _depends(other, product):
        return None  # the product must not wait for itself
    return (n.op, other, i == 1), other


def _depends(v, node) -> bool:
    """Whether value v is computed from node's results."""
    seen, stack = set(), [v]
    while stack:
        p = stack.pop().producer
        if p is node:
            return True
        if p is None or id(p) in seen or isinstance(p, (ir.Input, ir.Constant)):
            continue
        seen.add(id(p))
        stack.extend(p.inputs)
    return False


def fuse_epilogues(graph: ir.Graph) -> int:
    """Rewrites each product with an epilogue chain into one mm_epilogue
    Library node; returns how many."""
    if not ENABLED:
        return 0
    try:
        table = pw_ops()
        op = _op()
    except (OSError, ValueError, AttributeError, RuntimeError, jit.CompileError):
        return 0
    outputs = {v for v in graph.outputs if v is not None}
    position = {n: i for i, n in enumerate(graph.nodes)}
    done = 0
    for node in list(graph.nodes):
        if node not in position:
            continue
        found = _product(node)
        if found is None:
            continue
        a, b, bias = found
        c = node.out
        cur, shape, steps, operands, members = c, c.shape, [], [], []
        while len(steps) < MAX_STEPS:
            users = [u for u in cur.users if u in position]
            if cur is not c and (len(users) != 1 or cur in outputs):
                break
            nxt = None
            for u in sorted(users, key=position.__getitem__):
                if _split_rows(u, cur) and (cur is c or len(users) == 1):
                    # rows split into leading dims: follow the view's single reader
                    w = u.out
                    readers = [r for r in w.users if r in position]
                    if len(readers) == 1 and w not in outputs:
                        got = _step(readers[0], w, tuple(w.shape), node)
                        if got is not None:
                            nxt = (readers[0], got, [u], tuple(w.shape))
                            break
                    continue
                got = _step(u, cur, tuple(shape), node)
                if got is not None:
                    nxt = (u, got, [], tuple(shape))
                    break
            if nxt is None:
                break
            n, ((name, other, swap), _), views, new_shape = nxt
            if n.out.dtype != c.dtype and name != "identity":
                break  # type promotion past the product's dtype
            steps.append((name, other, swap))
            members.extend(views + [n])
            cur, shape = n.out, new_shape
            if cur.dtype != c.dtype:
                break  # a cast ends the chain
        if not steps:
            continue
        words = []
        for name, other, swap in steps:
            k = 0
            if other is not None:
                if other not in operands:
                    operands.append(other)
                k = operands.index(other) + 1
            words.append(table[name] | k << OPERAND_SHIFT | (SWAP if swap else 0))
        others = [u for u in c.users if u in position and u not in members]
        keep = c in outputs or bool(others)
        # the fused node runs where its last operand exists, before any
        # other reader of the product
        at = max([position[node]] + [position[o.producer] for o in operands
                                      if o.producer in position])
        if any(position[u] <= at for u in others):
            continue
        final = cur
        lib = Library(op, (a, b, bias, words, list(operands), final.dtype, keep, list(shape)),
                      {}, outputs=[c, final] if keep else [final], multi=True)
        lib.slots = [c, final] if keep else [final]
        lib.const = None
        lib.view = None
        lib.epilogue = [s[0] for s in steps]
        for v in lib.outputs:
            v.producer = lib
        drop = set(members) | {node}
        nodes = []
        for n in graph.nodes:
            if n not in drop:
                nodes.append(n)
            if position.get(n) == at:
                nodes.append(lib)
        graph.nodes = nodes
        graph.relink()
        position = {n: i for i, n in enumerate(graph.nodes)}
        done += 1
    return done
