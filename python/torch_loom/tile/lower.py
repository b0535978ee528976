"""What each ``tl.*`` function means when a kernel is compiled: the
tracer calls these with its own values (nodes.py) instead of running the
Python functions (which are the interpreter's, interpreter.py)."""

from __future__ import annotations

import re

from . import core, rowloop, rowmap
from . import nodes as N
from .nodes import Arr, Cast, Node, Range, Sca, View, Where
from .trace import Ptr


def _node(tr, v, d=None):
    return tr._as_node(v, d)


def _const(tr, v, what):
    if isinstance(v, (Node, Ptr)):
        raise TypeError(f"{what} must be a constexpr")
    return v.value if isinstance(v, core.constexpr) else v


def program_id(tr, axis):
    axis = _const(tr, axis, "tl.program_id's axis")
    if axis not in (0, 1, 2):
        raise ValueError(f"tl.program_id: axis must be 0, 1 or 2, got {axis}")
    out = Sca(f"pid{axis}", core.int32)
    if axis == 0:
        out.sym = {(rowmap.PID,): 1}
    else:
        tr.other_pid = True
    return out


def num_programs(tr, axis):
    axis = _const(tr, axis, "tl.num_programs's axis")
    if axis not in (0, 1, 2):
        raise ValueError(f"tl.num_programs: axis must be 0, 1 or 2, got {axis}")
    return Sca(f"np{axis}", core.int32)


def arange(tr, start, end):
    start, end = _const(tr, start, "tl.arange's start"), _const(tr, end, "tl.arange's end")
    n = int(end) - int(start)
    if n <= 0 or n & (n - 1):
        raise ValueError(f"tl.arange: the range must be a power of 2 long, got {start}..{end}")
    return Range(int(start), n)


def _shape(tr, shape):
    shape = _const(tr, shape, "a block's shape")
    shape = tuple(int(_const(tr, s, "a block's shape")) for s in (shape if isinstance(shape, (tuple, list)) else [shape]))
    if any(s <= 0 for s in shape):
        raise ValueError(f"block shapes must be positive, got {list(shape)}")
    return shape


def full(tr, shape, value, dtype):
    shape = _shape(tr, shape)
    dtype = _const(tr, dtype, "the dtype")
    v = Cast(_node(tr, value), dtype) if isinstance(value, Node) else Sca(N.literal(value, dtype), dtype)
    return tr._splat(v, shape) if shape else tr.node_out(v)


def zeros(tr, shape, dtype=core.float32):
    return full(tr, shape, 0, dtype)


def zeros_like(tr, x):
    return full(tr, x.shape, 0, x.dtype)


def _offset_expr(ptr, shape, idx):
    parts = []
    if ptr.soff is not None:
        parts.append(f"(int64_t)({N.emit(ptr.soff, [])})")
    if ptr.boff is not None:
        parts.append(f"(int64_t)({N.emit(ptr.boff, N.sub_idx(ptr.boff, shape, idx))})")
    return " + ".join(parts) or "0"


def _addr(ptr, shape, idx):
    if isinstance(ptr, _Affine):
        return f"{ptr.base} + {ptr.j}"
    return _offset_expr(ptr, shape, idx)


def _read(d, p, off):
    if d is core.float16:
        return f"loom_f16_to_f32({p}[{off}])"
    if d is core.bfloat16:
        return f"loom_bf16_to_f32({p}[{off}])"
    if d.kind == "b":
        return f"(uint8_t)({p}[{off}] != 0)"
    return f"{p}[{off}]"


def _write(d, p, off, v):
    if d is core.float16:
        return f"{p}[{off}] = loom_f32_to_f16({v});"
    if d is core.bfloat16:
        return f"{p}[{off}] = loom_f32_to_bf16({v});"
    if d.kind == "b":
        return f"{p}[{off}] = (uint8_t)(({v}) != 0);"
    return f"{p}[{off}] = ({d.ctype})({v});"


def _mask(tr, mask):
    if mask is None:
        return None
    m = _node(tr, mask)
    return m if m.dtype.kind == "b" else tr.to_bool(m)


def load(tr, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    if not isinstance(pointer, Ptr):
        raise TypeError("tl.load needs a pointer (a tensor argument plus offsets)")
    d = pointer.arg.dtype
    m = _mask(tr, mask)
    o = None
    if other is not None:
        o = _node(tr, other, d if not isinstance(other, Node) else None)
    shapes = [pointer.shape] + [x.shape for x in (m, o) if x is not None]
    shape = N.broadcast_shapes(*shapes, what="tl.load")
    tr.accesses.append(rowmap.Access("load", pointer.arg.index, pointer.soff, pointer.boff, m, shape,
                                     tr.in_runtime_block > 0))
    b = tr.b
    fill = N.convert(N.emit(o, []), o.dtype, d) if o is not None and not o.shape else None

    def body(idx, target, ptr=pointer):
        value = _read(d, ptr.arg.c, _addr(ptr, shape, idx))
        if m is None:
            return f"{target} = {value};"
        other_e = fill if fill is not None else (
            N.convert(N.emit(o, N.sub_idx(o, shape, idx)), o.dtype, d) if o is not None else N.literal(0, d))
        return f"{target} = {N.emit(m, N.sub_idx(m, shape, idx))} ? {value} : {other_e};"

    def body_p(idx, ptr, v):
        return body(idx, f"{v}[{N.flat(shape, idx)}]", ptr)

    def copy():
        """The block copied into an array where it stands (the eager load)."""
        v = b.name()
        b.line(f"{d.ctype} {v}[{N.numel(shape)}] __attribute__((aligned(64)));")
        if _row_mask(m, pointer, shape):
            def row(oidx):
                j = b.name("j")
                idx = oidx + [j]
                target = f"{v}[{N.flat(shape, idx)}]"
                other_e = N.convert(N.emit(o, N.sub_idx(o, shape, idx)), o.dtype, d) if o is not None else N.literal(0, d)
                cond = N.emit(m, N.sub_idx(m, shape, oidx + ["0"]))
                loop = f"for (int {j} = 0; {j} < {shape[-1]}; ++{j}) "
                return (f"if ({cond}) {{ {loop}{target} = {_read(d, pointer.arg.c, _addr(pointer, shape, idx))}; }} "
                        f"else {{ {loop}{target} = {other_e}; }}")
            b.loops(shape[:-1], row)
        else:
            _versioned(tr, pointer, shape, lambda idx, ptr: body_p(idx, ptr, v))
        return Arr(v, shape, d)

    index, lazy = N._mem.take(pointer.arg.index)
    if lazy and shape and (pointer.boff is None or not N.irregular(pointer.boff)):
        # read where it is used (nodes.Load): no copy
        def text(idx, ptr=pointer):
            value = _read(d, ptr.arg.c, _addr(ptr, shape, idx))
            if m is None:
                return value
            other_e = fill if fill is not None else (
                N.convert(N.emit(o, N.sub_idx(o, shape, idx)), o.dtype, d) if o is not None else N.literal(0, d))
            return f"({N.emit(m, N.sub_idx(m, shape, idx))} ? {value} : {other_e})"

        def raw(idx, ptr=pointer):
            return _read(d, ptr.arg.c, _addr(ptr, shape, idx))

        deps = [x for x in (pointer.soff, pointer.boff, m, o) if x is not None]
        node = N.Load(text, deps, shape, d, index, N._mem.loop_depth, raw, m)
        node.copy = copy  # when it is materialised after all
        return node

    if not shape:
        v = b.name()
        b.line(f"{d.ctype} {v};")
        b.line(body([], v))
        return Sca(v, d)
    return copy()


def _row_mask(m, pointer, shape):
    """A mask constant along the last dim (whole rows in or out), through
    regular offsets: the row's test goes outside its loop, which then
    vectorizes."""
    if m is None or len(shape) < 2 or shape[-1] == 1:
        return False
    if m.shape and len(m.shape) == len(shape) and m.shape[-1] != 1:
        return False
    if m.shape and len(m.shape) < len(shape):
        return False  # right-aligned: its last dim is the block's last dim
    return pointer.boff is None or not N.irregular(pointer.boff)


def _versioned(tr, pointer, shape, emit_body):
    """Loops over `shape` reading or writing through `pointer`: when its
    offsets are irregular (modulo, tables), they are materialised once and
    the rows that turn out consecutive at run time go the contiguous way."""
    b = tr.b
    boff = pointer.boff
    if boff is None or boff.shape != tuple(shape) or shape[-1] == 1 or not N.irregular(boff):
        b.loops(shape, lambda idx: emit_body(idx, pointer))
        return
    arr, flag = b.offsets(boff)
    cols = shape[-1]
    rows = N.numel(shape) // cols
    soff = f"(int64_t)({N.emit(pointer.soff, [])}) + " if pointer.soff is not None else ""
    b.line(f"if ({flag}) {{")
    b.depth += 1
    r, j = b.name("r"), b.name("j")
    base = b.name("base")
    b.line(f"for (int {r} = 0; {r} < {rows}; ++{r}) {{")
    b.depth += 1
    b.line(f"const int64_t {base} = {soff}{arr.name}[{r} * {cols}];")
    b.line(f"for (int {j} = 0; {j} < {cols}; ++{j}) {{")
    b.depth += 1
    flat_idx = _unflatten(shape[:-1], r) + [j]
    b.line(emit_body(flat_idx, _Affine(pointer.arg, base, j)))
    b.depth -= 1
    b.line("}")
    b.depth -= 1
    b.line("}")
    b.depth -= 1
    b.line("} else {")
    b.depth += 1
    table = Ptr(pointer.arg, pointer.soff, arr)
    b.loops(shape, lambda idx: emit_body(idx, table))
    b.depth -= 1
    b.line("}")


class _Affine:
    """A pointer known to be base + j along the last dim (in _versioned)."""

    def __init__(self, arg, base, j):
        self.arg, self.base, self.j = arg, base, j


def _unflatten(shape, flat_expr):
    if len(shape) == 1:
        return ["0" if shape[0] == 1 else flat_expr]
    idx = []
    stride = N.numel(shape)
    for n in shape:
        stride //= n
        idx.append("0" if n == 1 else f"(({flat_expr} / {stride}) % {n})")
    return idx


def store(tr, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    if not isinstance(pointer, Ptr):
        raise TypeError("tl.store needs a pointer (a tensor argument plus offsets)")
    d = pointer.arg.dtype
    N._mem.stored.add(pointer.arg.index)
    val = _node(tr, value, d if not isinstance(value, Node) else None)
    m = _mask(tr, mask)
    shapes = [pointer.shape, val.shape] + ([m.shape] if m is not None else [])
    shape = N.broadcast_shapes(*shapes, what="tl.store")
    tr.accesses.append(rowmap.Access("store", pointer.arg.index, pointer.soff, pointer.boff, m, shape,
                                     tr.in_runtime_block > 0))
    N._mem.access(shape)
    if val.shape and N.broadcast_shapes(pointer.shape, val.shape) != pointer.shape and pointer.shape:
        raise ValueError(f"tl.store: a value of shape {list(val.shape)} into pointers of shape "
                         f"{list(pointer.shape)}")

    def body(idx, ptr=pointer):
        v = N.emit(val, N.sub_idx(val, shape, idx))
        if val.dtype.ctype != "float" or d.ctype != "float":
            v = N.convert(v, val.dtype, d) if d.kind != "f" or val.dtype.kind != "f" else f"({d.ctype})({v})"
        w = _write(d, ptr.arg.c, _addr(ptr, shape, idx), v)
        return w if m is None else f"if ({N.emit(m, N.sub_idx(m, shape, idx))}) {w}"

    if not shape:
        tr.b.line(body([]))
        return
    if _through_row_loop(tr, pointer, val, m, shape, d):
        return
    if _chunked_store(tr, pointer, val, m, shape, d):
        return
    if _row_mask(m, pointer, shape):
        b = tr.b

        def row(oidx):
            j = b.name("j")
            cond = N.emit(m, N.sub_idx(m, shape, oidx + ["0"]))
            v = N.emit(val, N.sub_idx(val, shape, oidx + [j]))
            if val.dtype.ctype != "float" or d.ctype != "float":
                v = N.convert(v, val.dtype, d) if d.kind != "f" or val.dtype.kind != "f" else f"({d.ctype})({v})"
            w = _write(d, pointer.arg.c, _addr(pointer, shape, oidx + [j]), v)
            return f"if ({cond}) {{ for (int {j} = 0; {j} < {shape[-1]}; ++{j}) {w} }}"
        b.loops(shape[:-1], row)
        return
    _versioned(tr, pointer, shape, body)


_CONST = re.compile(r"^\s*const [A-Za-z_][\w ]*?\s(\w+) = .*;$")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _through_row_loop(tr, pointer, val, m, shape, d):
    """A float32 store of a value computed from one block `a` that a row
    loop materialises while reducing it (softmax's e = exp(x - max),
    stored as e / sum e): the row loop also writes `a` to the stored
    addresses as it computes it, and the store becomes an in-place pass
    over what it wrote (the library's softmax: exp and sum writing the
    output, then scaling it in place), instead of a pass storing from the
    program's stack. Only where nothing in between can tell: the store is
    in the loop's scope, and the lines between them are constant scalar
    definitions that do not read the stored argument (those the loop's
    results feed move after it). The values stored are the same bits.
    False where it does not apply."""
    if d is not core.float32 or val.dtype is not core.float32 or len(shape) < 1:
        return False
    if shape[-1] % rowloop.LANES or (pointer.boff is not None and N.irregular(pointer.boff)):
        return False
    a = _only_array(val)
    loop = a.__dict__.get("producer") if a is not None else None
    if (loop is None or not loop.reductions or loop.dest != a.name or tuple(a.shape) != tuple(shape)
            or tuple(loop.shape) != tuple(shape) or loop.scopes != tuple(N._open_scopes)):
        return False
    b = tr.b
    at = next((k for k, x in enumerate(b.lines) if x is loop), None)
    if at is None:
        return False
    between = b.lines[at + 1:]
    p = pointer.arg.c
    defined = loop.names()
    moved, kept = [], []
    for x in between:
        c = _CONST.match(x) if isinstance(x, str) else None
        if c is None:
            return False
        used = set(_NAME.findall(x.split("=", 1)[1]))
        if p in used:
            return False
        if used & defined:
            defined.add(c.group(1))
            moved.append(x)
        else:
            kept.append(x)
    # the loop's own lane index: the store's address and mask there
    lidx = loop.idx
    addr = _addr(pointer, shape, lidx)
    cond = N.emit(m, N.sub_idx(m, shape, lidx)) if m is not None else None
    if set(_NAME.findall(addr + (cond or ""))) & (defined - loop.names()):
        return False
    # the in-place pass: `a` read back from the stored addresses
    lead = [(b.name("o"), n) for n in shape[:-1]]
    i, l = b.name("i"), b.name("l")
    idx = [v if n != 1 else "0" for v, n in lead] + [f"{i} + {l}"]
    text, raw, masks = N.masked_and_raw(lambda: N.emit(val, N.sub_idx(val, shape, idx)))
    a_text = N.emit(a, N.sub_idx(a, shape, idx))
    if masks or a_text not in text or p in _NAME.findall(text):
        return False
    w = _write(d, p, addr, f"{loop.t}[{loop.l}]")
    loop_masks = {id(x) for x in loop.masks}
    loop.outs.append((w if m is None or id(m) in loop_masks else f"if ({cond}) {w}",
                      w if m is None else f"if ({cond}) {w}"))
    b.lines[at:] = []
    b.lines.extend(kept)
    b.lines.append(loop)
    b.lines.extend(moved)
    if text == a_text:
        return True  # the loop stored the value itself
    saddr = _addr(pointer, shape, idx)
    value = text.replace(a_text, f"{p}[{saddr}]")
    st = _write(d, p, saddr, value)
    if m is not None:
        st = f"if ({N.emit(m, N.sub_idx(m, shape, idx))}) {st}"
    unmasked = _write(d, p, saddr, value)
    pad = "  " * b.depth
    loops = [(v, n) for v, n in lead if n != 1]

    def body(plain):
        head = "".join(f"for (int {v} = 0; {v} < {n}; ++{v}) " for v, n in loops)
        return ([f"{pad}{head}for (int {i} = 0; {i} < {shape[-1]}; {i} += {rowloop.LANES}) {{"]
                + rowloop.VECTOR_LOOP
                + [f"{pad}  for (int {l} = 0; {l} < {rowloop.LANES}; ++{l}) {unmasked if plain else st}",
                   f"{pad}}}"])

    b.lines.extend(rowloop.versions(pad, b.mask_check([m]) if m is not None else None, body))
    return True


def _only_array(val):
    """The one block a row loop computes (an Arr with a producer) that
    `val` reads, beside scalars, constants and other arrays (a row's sum
    broadcast), or None (loads, ranges, or several such blocks)."""
    stack, found = [val], []
    while stack:
        n = stack.pop()
        mat = n.__dict__.get("mat")
        if mat is not None and tuple(N._open_scopes[:len(mat[1])]) == mat[1]:
            n = mat[0]
        if isinstance(n, Arr):
            if n.__dict__.get("producer") is not None and all(x is not n for x in found):
                found.append(n)
            continue
        if isinstance(n, (Range, N.Load)):
            return None
        stack.extend(x for x in n.__dict__.values() if isinstance(x, Node))
    return found[0] if len(found) == 1 else None


def _chunked_store(tr, pointer, val, m, shape, d):
    """A masked store (or one of masked lazy loads) through regular
    offsets, rows a multiple of 16 long, in chunks of 16 lanes: without
    masks when all of them hold over the block (rowloop.versions). False
    where it does not apply."""
    if shape[-1] % rowloop.LANES or (pointer.boff is not None and N.irregular(pointer.boff)):
        return False
    b = tr.b
    lead = [(b.name("o"), n) for n in shape[:-1]]
    i, l = b.name("i"), b.name("l")
    idx = [v if n != 1 else "0" for v, n in lead] + [f"{i} + {l}"]

    def write(lanes=None):
        v = N.emit(val, N.sub_idx(val, shape, idx))
        if val.dtype.ctype != "float" or d.ctype != "float":
            v = N.convert(v, val.dtype, d) if d.kind != "f" or val.dtype.kind != "f" else f"({d.ctype})({v})"
        if lanes is not None:
            return f"{lanes}[{l}] = (float)({v});"
        return _write(d, pointer.arg.c, _addr(pointer, shape, idx), v)

    text, raw, masks = N.masked_and_raw(write)
    streamed = _streamed(pointer, shape, d)
    if streamed:
        lanes = b.name("s")
        s_text, s_raw, _ = N.masked_and_raw(lambda: write(lanes))
        s_raw = s_text if s_raw is None else s_raw
        dst = _addr(pointer, shape, idx[:-1] + [f"{i} + 0"])
    if m is not None:
        cond = N.emit(m, N.sub_idx(m, shape, idx))
        masks = [m] + [x for x in masks if x is not m]
        raw = text if raw is None else raw
        text = f"if ({cond}) {text}"
    if not masks:
        return False
    pad = "  " * b.depth
    loops = [(v, n) for v, n in lead if n != 1]

    def body(unmasked):
        head = "".join(f"for (int {v} = 0; {v} < {n}; ++{v}) " for v, n in loops)
        if unmasked and streamed:  # whole chunks of 16: stored past the cache when the launch may
            return ([f"{pad}{head}for (int {i} = 0; {i} < {shape[-1]}; {i} += {rowloop.LANES}) {{",
                     f"{pad}  float {lanes}[{rowloop.LANES}] __attribute__((aligned(64)));"]
                    + rowloop.VECTOR_LOOP
                    + [f"{pad}  for (int {l} = 0; {l} < {rowloop.LANES}; ++{l}) {s_raw}",
                       f"{pad}  loom_tile_put16(&{pointer.arg.c}[{dst}], {lanes}, LOOM_TILE_STREAMING(A));",
                       f"{pad}}}"])
        return ([f"{pad}{head}for (int {i} = 0; {i} < {shape[-1]}; {i} += {rowloop.LANES}) {{"]
                + rowloop.VECTOR_LOOP
                + [f"{pad}  for (int {l} = 0; {l} < {rowloop.LANES}; ++{l}) {raw if unmasked else text}", f"{pad}}}"])

    b.lines.extend(rowloop.versions(pad, b.mask_check(masks), body))
    return True


def _streamed(pointer, shape, d):
    """Whether a store's unmasked chunks of 16 lanes are 16 consecutive
    float32 elements (a row: ``T + s + tl.arange(0, B)``, s a scalar), which
    a launch hinted LOOM_KERNEL_HINT_STREAM (nothing reads them from the
    cache before they leave it) stores past the cache: no line is read
    for ownership before it is overwritten whole (loom_tile_put16)."""
    if d is not core.float32 or len(shape) != 1 or shape[0] % rowloop.LANES or pointer.boff is None:
        return False
    b = rowmap.block_sym(pointer.boff)
    return b is not None and b[1] == shape[0]


def where(tr, condition, x, y):
    c = _mask(tr, condition)
    xw, yw = not isinstance(x, Node), not isinstance(y, Node)
    dx = x.dtype if not xw else core.scalar_dtype(x)
    dy = y.dtype if not yw else core.scalar_dtype(y)
    d = core.promote(dx, dy, xw, yw)
    xn, yn = _node(tr, x, d if xw else None), _node(tr, y, d if yw else None)
    shape = N.broadcast_shapes(c.shape, xn.shape, yn.shape, what="tl.where")
    return tr.node_out(Where(c, xn, yn, shape, d))


def _unary(op):
    def f(tr, x, *args, **kwargs):
        return tr.unary(op, x)
    f.__name__ = op
    return f


def maximum(tr, x, y, propagate_nan=None):
    r = tr.binop("maximum", x, y)
    if isinstance(r, Node):
        r.bounds = frozenset({id(v) for v in (x, y) if isinstance(v, Node)}) | \
            N.bounds_of(x) | N.bounds_of(y)
    return r


def minimum(tr, x, y, propagate_nan=None):
    return tr.binop("minimum", x, y)


def fma(tr, x, y, z):
    return tr.binop("add", tr.binop("mul", x, y), z)


def cdiv(tr, x, div):
    if not isinstance(x, Node) and not isinstance(div, Node):
        return core.cdiv(x, div)
    return tr.binop("floordiv", tr.binop("sub", tr.binop("add", x, div), 1), div)


def to(tr, x, dtype, fp_downcast_rounding=None, bitcast=False):
    dtype = _const(tr, dtype, "the dtype")
    if bitcast:
        raise NotImplementedError("bitcast is not supported")
    if not isinstance(dtype, core.dtype):
        raise TypeError(f".to() needs a tl dtype, got {dtype!r}")
    x = _node(tr, x)
    return x if x.dtype is dtype else tr.node_out(Cast(x, dtype))


def cast(tr, x, dtype, **kw):
    return to(tr, x, dtype, **kw)


_RED_SUFFIX = {"float": "f", "double": "d", "int32_t": "i", "int64_t": "I"}


def _reduce(tr, x, axis, op, keep_dims):
    x = _node(tr, x)
    axis = _const(tr, axis, "the axis")
    if not x.shape:
        return x
    d = core.reduce_dtype(x.dtype, op) if op in ("sum", "max", "min") else x.dtype
    if d.ctype not in _RED_SUFFIX:
        d = core.int32 if d.kind in "iub" else d
    if op in ("sum", "max", "min") and (axis is None or axis in (-1, len(x.shape) - 1)):
        # in one pass with the loop computing x, or over lazy x (rowloop.py)
        src = x if x.dtype is d else Cast(x, d)
        result = tr.b.reduce_rows(src, op, axis is None)
        if result is not None:
            if op == "max":
                result.bounds = frozenset({id(x)})
            if keep_dims and axis is not None:
                rank = len(x.shape)
                result = View(result, x.shape[:-1] + (1,), range(rank - 1))
            return result
    if axis is None:
        flat_n = N.numel(x.shape)
        src = tr.b.materialise(x if x.dtype.ctype == d.ctype else Cast(x, d))
        src = Arr(src.name, (flat_n,), d)
        axis, shape = 0, (flat_n,)
        keep = None
    else:
        if axis < 0:
            axis += len(x.shape)
        if not 0 <= axis < len(x.shape):
            raise ValueError(f"axis {axis} is out of range for a block of shape {list(x.shape)}")
        src = tr.b.materialise(x if x.dtype.ctype == d.ctype else Cast(x, d))
        src = Arr(src.name, x.shape, d)
        shape = x.shape
        keep = axis
    out_dtype = core.int32 if op in ("argmax", "argmin") else d
    fn = f"loom_tile_{op}{_RED_SUFFIX[d.ctype]}"
    n = shape[axis]
    stride = N.numel(shape[axis + 1:])
    out_shape = shape[:axis] + shape[axis + 1:]
    b = tr.b
    v = b.name()
    if not out_shape:
        b.line(f"const {out_dtype.ctype} {v} = {fn}({src.name}, {n}, 1);")
        result = Sca(v, out_dtype)
    elif op in ("sum", "max", "min") and axis == 0 and stride > 1 and len(shape) == 2:
        # over rows: the columns are the vector lanes
        step = {"sum": "a + x", "max": "((x != x || x > a) ? x : a)", "min": "((x != x || x < a) ? x : a)"}[op]
        cols = shape[1]
        b.line(f"{d.ctype} {v}[{cols}] __attribute__((aligned(64)));")
        b.line(f"for (int j = 0; j < {cols}; ++j) {v}[j] = {src.name}[j];")
        b.line(f"for (int r = 1; r < {n}; ++r) for (int j = 0; j < {cols}; ++j) "
               f"{{ {d.ctype} a = {v}[j], x = {src.name}[r * {cols} + j]; {v}[j] = {step}; }}")
        result = Arr(v, out_shape, out_dtype)
    else:
        b.line(f"{out_dtype.ctype} {v}[{N.numel(out_shape)}] __attribute__((aligned(64)));")
        outer = N.numel(shape[:axis])
        b.line(f"for (int o = 0; o < {outer}; ++o) for (int q = 0; q < {stride}; ++q) "
               f"{v}[o * {stride} + q] = {fn}({src.name} + o * {n * stride} + q, {n}, {stride});")
        result = Arr(v, out_shape, out_dtype)
    if op == "max":
        result.bounds = frozenset({id(x)})  # >= every element of x along the axis
    if keep_dims and keep is not None:
        full_shape = list(shape)
        full_shape[keep] = 1
        src_dims = [k for k in range(len(shape)) if k != keep]
        result = View(result, full_shape, src_dims)
    return result


def sum(tr, input, axis=None, keep_dims=False, dtype=None):
    r = _reduce(tr, input, axis, "sum", keep_dims)
    return to(tr, r, dtype) if dtype is not None else r


def max(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    r = _reduce(tr, input, axis, "max", keep_dims)
    if return_indices:
        return r, _reduce(tr, input, axis, "argmax", keep_dims)
    return r


def min(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    r = _reduce(tr, input, axis, "min", keep_dims)
    if return_indices:
        return r, _reduce(tr, input, axis, "argmin", keep_dims)
    return r


def argmax(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, input, axis, "argmax", keep_dims)


def argmin(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, input, axis, "argmin", keep_dims)


def dot(tr, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=core.float32):
    a, b_ = _node(tr, input), _node(tr, other)
    if len(a.shape) != 2 or len(b_.shape) != 2 or a.shape[1] != b_.shape[0]:
        raise ValueError(f"tl.dot: shapes {list(a.shape)} and {list(b_.shape)} do not multiply "
                         "(2-d blocks [M, K] and [K, N])")
    for x in (a, b_):
        if x.dtype.ctype != "float":
            raise TypeError(f"tl.dot: {x.dtype.name} operands are not supported "
                            "(float32, float16, bfloat16)")
    M, K = a.shape
    Nn = b_.shape[1]
    b = tr.b
    A = b.materialise(a)
    B = b.materialise(b_)
    c = b.name()
    b.line(f"float {c}[{M * Nn}] __attribute__((aligned(64)));")
    C = Arr(c, (M, Nn), core.float32)
    if acc is None:
        pass  # the dot starts from zero
    else:
        acc_n = _node(tr, acc)
        if N.broadcast_shapes(acc_n.shape, (M, Nn)) != (M, Nn):
            raise ValueError(f"tl.dot: acc of shape {list(acc_n.shape)} for a [{M}, {Nn}] product")
        b.assign(C, acc_n)
    b.line(f"loom_tile_dot({M}, {Nn}, {K}, {A.name}, {B.name}, {c}, {1 if acc is None else 0});")
    if acc is None and out_dtype is not core.float32:
        return to(tr, C, out_dtype)
    if acc is not None and isinstance(acc, Node) and acc.dtype is not core.float32:
        return Cast(C, acc.dtype)
    return C


def trans(tr, input, *dims):
    x = _node(tr, input)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if not dims:
        dims = tuple(reversed(range(len(x.shape))))
    if sorted(dims) != list(range(len(x.shape))):
        raise ValueError(f"tl.trans: {list(dims)} is not a permutation of the dims of {list(x.shape)}")
    shape = [x.shape[d] for d in dims]
    src = [dims.index(k) for k in range(len(x.shape))]
    return View(x, shape, src)


def permute(tr, input, *dims):
    return trans(tr, input, *dims)


def broadcast_to(tr, input, *shape):
    x = _node(tr, input)
    shape = _shape(tr, shape[0] if len(shape) == 1 else shape)
    if N.broadcast_shapes(x.shape, shape) != shape:
        raise ValueError(f"tl.broadcast_to: {list(x.shape)} does not broadcast to {list(shape)}")
    return tr._splat(x, shape) if x.shape else View(x, shape, range(len(shape) - len(x.shape), len(shape)))


def expand_dims(tr, input, axis):
    x = _node(tr, input)
    axis = _const(tr, axis, "the axis")
    axes = [axis] if isinstance(axis, int) else list(axis)
    rank = len(x.shape) + len(axes)
    axes = sorted(a + rank if a < 0 else a for a in axes)
    shape, src, k = [], [], 0
    for d in range(rank):
        if d in axes:
            shape.append(1)
        else:
            src.append(d)
            shape.append(x.shape[k])
            k += 1
    return View(x, shape, src)


def reshape(tr, input, *shape, can_reorder=False):
    x = _node(tr, input)
    shape = _shape(tr, shape[0] if len(shape) == 1 else shape)
    if N.numel(shape) != N.numel(x.shape):
        raise ValueError(f"tl.reshape: {list(x.shape)} has not as many elements as {list(shape)}")
    arr = tr.b.materialise(x)
    return Arr(arr.name, shape, arr.dtype)


view = reshape


def _identity(tr, x, *args, **kwargs):
    return x


def _nothing(tr, *args, **kwargs):
    return None


def static_assert(tr, cond, msg=""):
    if isinstance(cond, Node):
        raise TypeError("tl.static_assert needs a constexpr condition")
    if not cond:
        raise ValueError(f"tl.static_assert failed: {msg}")


def table(lang):
    """id(tl function) -> its compile-time meaning; plus names the tracer
    asks for (static_range, range, where, trans, to, methods)."""
    unary = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "abs", "sin", "cos",
             "erf", "floor", "ceil"]
    impl = {
        "program_id": program_id, "num_programs": num_programs, "arange": arange, "full": full,
        "zeros": zeros, "zeros_like": zeros_like, "load": load, "store": store, "where": where,
        "maximum": maximum, "minimum": minimum, "fma": fma, "cdiv": cdiv, "sum": sum, "max": max,
        "min": min, "argmax": argmax, "argmin": argmin, "dot": dot, "trans": trans,
        "permute": permute, "broadcast_to": broadcast_to, "expand_dims": expand_dims,
        "reshape": reshape, "view": view, "cast": cast, "multiple_of": _identity,
        "max_contiguous": _identity, "max_constancy": _identity, "assume": _nothing,
        "debug_barrier": _nothing, "static_print": _nothing, "device_print": _nothing,
        "device_assert": _nothing, "static_assert": static_assert,
    }
    for name in unary:
        impl[name] = _unary(name)
    impl["sqrt_rn"] = impl["sqrt"]
    out = {}
    for name, f in impl.items():
        fn = getattr(lang, name, None)
        if fn is not None:
            out[id(fn)] = f
        out[name] = f
    out["to"] = to
    out["static_range"] = lang.static_range
    out["range"] = lang.range
    for name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "abs", "sin", "cos", "erf",
                 "floor", "ceil"):
        if hasattr(lang, "math") and hasattr(lang.math, name):
            out[id(getattr(lang.math, name))] = impl[name]
    return out
