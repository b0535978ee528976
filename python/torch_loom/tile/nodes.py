"""The tile IR: block values of a traced kernel and their C spelling.

A block is a value of a fixed shape (known when the kernel is specialised)
and a dtype. Elementwise values stay *lazy* (an expression over the
block's element indices) until something needs them whole -- a reduction,
a dot, a loop-carried variable -- and are then materialised into a C array
on the program's stack (row-major). Loads materialise at once (they read
memory at their place in the program); stores and further elementwise ops
inline lazy operands, so a chain of pointwise ops is one loop the C
compiler vectorises. Scalars (shape ``()``) are C variables, computed
where they appear.

Float math is the library's (``compiler.emit_c.op_expr``: the inline
functions of kernels/pointwise/*.h), float16 and bfloat16 are computed in
float and rounded after every op, integers wrap (the module is compiled
with -fwrapv).
"""

from __future__ import annotations


from ..compiler import emit_c
from ..compiler.ir import F32, F64
from . import core, rowloop


class Node:
    shape: tuple = ()
    dtype: core.dtype = core.float32


class Arr(Node):
    """A materialised block: C array `name` (row-major), or a C scalar
    variable when the shape is ()."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype


class Sca(Node):
    """A scalar C expression (a variable or a literal)."""

    def __init__(self, expr, dtype):
        self.expr, self.dtype, self.shape = expr, dtype, ()


class Range(Node):
    def __init__(self, start, n):
        self.start, self.shape, self.dtype = start, (n,), core.int32


class Un(Node):
    def __init__(self, op, a, dtype):
        self.op, self.a, self.shape, self.dtype = op, a, a.shape, dtype


class Bin(Node):
    def __init__(self, op, a, b, shape, dtype):
        self.op, self.a, self.b, self.shape, self.dtype = op, a, b, shape, dtype


class Where(Node):
    def __init__(self, c, a, b, shape, dtype):
        self.c, self.a, self.b, self.shape, self.dtype = c, a, b, shape, dtype


class Cast(Node):
    def __init__(self, a, dtype):
        self.a, self.shape, self.dtype = a, a.shape, dtype


class Load(Node):
    """A block read from memory where it is used, not copied first:
    `text(idx)` is the C of the element at idx (the masked read). Only
    for arguments the kernel never writes, when no two tensor arguments
    share memory (see _Memory), so memory under it cannot change."""

    def __init__(self, text, deps, shape, dtype, index, depth, raw, mask):
        self.text, self.deps, self.shape, self.dtype = text, tuple(deps), tuple(shape), dtype
        self.index, self.depth = index, depth
        self.raw = raw  # raw(idx): the read without the mask
        self.mask = mask  # the mask (a node), or None


class _Memory:
    """Which loads of one trace stay lazy (Load nodes). A trace runs again
    with those that broke a rule made eager (copied where they stand): a
    load from an argument the kernel stores into, and a load used inside
    a loop deeper than its own (it would be read again each iteration)."""

    def reset(self, lazy=False, eager=(), written=()):
        self.lazy, self.eager, self.written = lazy, frozenset(eager), frozenset(written)
        self.count = 0
        self.loop_depth = 0
        self.work = 0
        self.stored, self.violations = set(), set()

    def access(self, shape):
        """A store of a block of `shape` (the work that sizes a launch's chunks)."""
        self.work += numel(shape) * 8 ** self.loop_depth

    def take(self, arg_index):
        """The next load's number, and whether it may stay lazy."""
        i = self.count
        self.count += 1
        return i, self.lazy and i not in self.eager and arg_index not in self.written

    def use(self, node):
        if self.loop_depth > node.depth:
            self.violations.add(node.index)

    def settled(self):
        return self.stored <= self.written and self.violations <= self.eager


_mem = _Memory()
_mem.reset()

#: While text is emitted for masked_and_raw: the masks of the lazy loads
#: met (id -> node), and whether loads are read without their masks; then
#: also the ids of those masks (seen through views), which hold everywhere
#: there, so a where() on one of them is its first operand.
_mask_log = None
_unmasked = False
_true_masks = frozenset()


def _unview(n):
    while isinstance(n, View):
        n = n.a
    return n


def masked_and_raw(make):
    """make() -> C text (through emit). Returns (text, raw, masks): `raw`
    is the same text with lazy loads read without their masks, equal to
    `text` where all of `masks` (the loads' mask nodes) hold everywhere;
    None (and no masks) when no masked load is read. Code takes raw when
    every mask holds (Builder.mask_check): unmasked loads vectorize
    without chains of masked loads."""
    global _mask_log, _unmasked, _true_masks
    saved = _mask_log
    _mask_log = {}
    try:
        text = make()
        masks = list(_mask_log.values())
    finally:
        _mask_log = saved
    if not masks:
        return text, None, []
    saved_true = _true_masks
    _unmasked = True
    _true_masks = saved_true | {id(_unview(m)) for m in masks}
    try:
        raw = make()
    finally:
        _unmasked = False
        _true_masks = saved_true
    return text, raw, masks


class View(Node):
    """Reads `a` with its dim k at this node's dim src[k] (expand_dims,
    trans, broadcast_to)."""

    def __init__(self, a, shape, src):
        self.a, self.shape, self.src, self.dtype = a, tuple(shape), tuple(src), a.dtype


def broadcast_shapes(*shapes, what="broadcast"):
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for k, n in enumerate(s):
            d = rank - len(s) + k
            if out[d] == 1:
                out[d] = n
            elif n != 1 and n != out[d]:
                raise ValueError(f"{what}: shapes {' and '.join(str(list(x)) for x in shapes)} "
                                 "do not broadcast")
    return tuple(out)


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def flat(shape, idx):
    """The row-major offset of index expressions `idx` in an array of `shape`."""
    terms, stride = [], 1
    for n, i in reversed(list(zip(shape, idx))):
        if n != 1 and i != "0":
            terms.append(i if stride == 1 else f"{i} * {stride}")
        stride *= n
    return " + ".join(reversed(terms)) or "0"


def sub_idx(child, shape, idx):
    """`idx` (for `shape`) as the index of a broadcast operand `child`."""
    r = len(child.shape)
    tail = idx[len(shape) - r:] if r else []
    return [i if n != 1 else "0" for n, i in zip(child.shape, tail)]


def literal(value, d: core.dtype) -> str:
    if d.kind == "f":
        text = emit_c.literal(float(value), F64 if d is core.float64 else F32)
        return text
    if d.kind == "b":
        return "1" if value else "0"
    v = int(value)
    if d.bits == 64:
        return f"INT64_C({v})" if v != -(2**63) else "INT64_MIN"
    return f"(({d.ctype}){v})"


def round_to(expr, d: core.dtype) -> str:
    """`expr` (in d.ctype's arithmetic) rounded to `d`."""
    if d is core.float16:
        return f"loom_cg_f16({expr})"
    if d is core.bfloat16:
        return f"loom_cg_bf16({expr})"
    if d.kind == "b":
        return f"(uint8_t)(({expr}) != 0)"
    if d.kind in "iu" and d.bits < 32:
        return f"({d.ctype})({expr})"
    return expr


def convert(expr, src: core.dtype, dst: core.dtype) -> str:
    if src is dst:
        return expr
    if dst.kind == "b":
        return f"(uint8_t)(({expr}) != 0)"
    if dst.kind == "f":
        if src.ctype == dst.ctype and src.kind == "f":
            return round_to(expr, dst)  # float32 <-> float16/bfloat16: both in float
        return round_to(f"({dst.ctype})({expr})", dst)
    return f"({dst.ctype})({expr})"


_FLOAT_OPS = {"add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "exp", "exp2",
              "log", "log2", "sqrt", "rsqrt", "sigmoid", "abs", "maximum", "minimum", "sin",
              "cos", "tanh", "erf", "floor", "ceil", "neg", "log1p", "expm1"}
_C_BIN = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "/", "mod": "%",
          "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
          "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
CMP = {"eq", "ne", "lt", "le", "gt", "ge"}


def op_c(op, d: core.dtype, xs) -> str:
    """The C expression of `op` over operands already in d.ctype (the
    result, before rounding, is in d.ctype; comparisons give 0/1)."""
    if d.kind == "f":
        kind = F64 if d is core.float64 else F32
        name = {"truediv": "div", "pow": "pow"}.get(op, op)
        if name in _FLOAT_OPS or name == "pow":
            e = emit_c.op_expr(name, kind, xs, [])
            if e is not None:
                return f"({e})"
        suffix = "f" if kind == F32 else ""
        if op == "floordiv":
            return f"floor{suffix}({xs[0]} / {xs[1]})"
        if op == "mod":
            return f"fmod{suffix}({xs[0]}, {xs[1]})"
        if op == "fma":
            return f"fma{suffix}({xs[0]}, {xs[1]}, {xs[2]})"
        if op == "cdiv":
            return f"ceil{suffix}({xs[0]} / {xs[1]})"
        if op in ("cos", "sin", "tan", "atan", "tanh"):
            return f"{op}{suffix}({xs[0]})"
        raise NotImplementedError(f"{op} on {d.name}")
    x = xs[0]
    y = xs[1] if len(xs) > 1 else None
    if op in _C_BIN:
        return f"({x} {_C_BIN[op]} {y})"
    table = {
        "neg": f"(-{x})", "abs": f"({x} < 0 ? -{x} : {x})", "invert": f"(~{x})",
        "maximum": f"({x} > {y} ? {x} : {y})", "minimum": f"({x} < {y} ? {x} : {y})",
        "fma": f"({x} * {y} + {xs[-1]})", "not": f"(!{x})",
        "logical_and": f"({x} && {y})", "logical_or": f"({x} || {y})",
        "cdiv": f"(({x} + {y} - 1) / {y})",
    }
    if op in table:
        return table[op]
    raise NotImplementedError(f"{op} on {d.name}")


#: The scopes (loop and branch bodies) open where code is being emitted: a
#: value materialised in a scope is reused only inside it.
_open_scopes = [0]


def emit(node: Node, idx) -> str:
    """The C expression of `node`'s element at index expressions `idx`."""
    mat = node.__dict__.get("mat")
    if mat is not None:
        arr, scopes = mat
        if tuple(_open_scopes[:len(scopes)]) == scopes:
            return emit(arr, idx)
    if isinstance(node, Arr):
        return node.name if not node.shape else f"{node.name}[{flat(node.shape, idx)}]"
    if isinstance(node, Sca):
        return node.expr
    if isinstance(node, Load):
        _mem.use(node)
        if _unmasked:
            return node.raw(idx)
        if _mask_log is not None and node.mask is not None:
            _mask_log[id(node.mask)] = node.mask
        return node.text(idx)
    if isinstance(node, Range):
        return f"(int32_t)({node.start} + {idx[0]})"
    if isinstance(node, Cast):
        return convert(emit(node.a, idx), node.a.dtype, node.dtype)
    if isinstance(node, View):
        child = [("0" if node.a.shape[k] == 1 else idx[s]) for k, s in enumerate(node.src)]
        return emit(node.a, child)
    if isinstance(node, Where):
        if _unmasked and id(_unview(node.c)) in _true_masks:  # a view reads every element
            return convert(emit(node.a, sub_idx(node.a, node.shape, idx)), node.a.dtype, node.dtype)
        c = emit(node.c, sub_idx(node.c, node.shape, idx))
        a = convert(emit(node.a, sub_idx(node.a, node.shape, idx)), node.a.dtype, node.dtype)
        b = convert(emit(node.b, sub_idx(node.b, node.shape, idx)), node.b.dtype, node.dtype)
        if _may_trap(node.a) or _may_trap(node.b):
            return f"({c} ? {a} : {b})"  # only the chosen side computed
        # both sides computed (GNU statement expression), then chosen: a
        # select the vectorizer takes, where a branch would keep the loop scalar
        return f"({{ const {node.dtype.ctype} w_a = {a}, w_b = {b}; {c} ? w_a : w_b; }})"
    if isinstance(node, Un):
        d = node.dtype
        x = emit(node.a, sub_idx(node.a, node.shape, idx))
        if node.op == "not":
            return f"(uint8_t)(!{x})"
        if node.op == "exp_neg":
            return round_to(f"LOOM_TILE_EXP_NEG({convert(x, node.a.dtype, core.float32)})", d)
        return round_to(op_c(node.op, d, [convert(x, node.a.dtype, d)]), d)
    if isinstance(node, Bin):
        operand_dtype = node.operand_dtype if hasattr(node, "operand_dtype") else node.dtype
        xs = []
        for c in (node.a, node.b) + getattr(node, "more", ()):
            xs.append(convert(emit(c, sub_idx(c, node.shape, idx)), c.dtype, operand_dtype))
        e = op_c(node.op, operand_dtype, xs)
        if node.op in CMP or node.op in ("logical_and", "logical_or"):
            return f"(uint8_t){e}"
        return round_to(e, node.dtype)
    raise TypeError(f"cannot emit {type(node).__name__}")


_COSTLY = {"exp", "exp_neg", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "sin", "cos", "erf", "tanh",
           "truediv", "floordiv", "mod", "maximum", "minimum", "pow"}


def costly(node):
    """Whether a lazy value holds an op worth computing once (and whose
    select or library math would keep a loop that inlines it scalar)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Arr):
            continue
        if isinstance(n, (Un, Bin)) and n.op in _COSTLY:
            return True
        for attr in ("a", "b", "c"):
            child = getattr(n, attr, None)
            if isinstance(child, Node):
                stack.append(child)
    return False


def bounds_of(v):
    """The ids of the values `v` is known to be >= (elementwise, along
    the dims it was reduced over): maxima and maximum() record them."""
    seen = v
    while isinstance(seen, View):
        seen = seen.a
    return seen.__dict__.get("bounds", frozenset()) if isinstance(seen, Node) else frozenset()


def non_positive(node):
    """Whether `node` is x - m with m >= x (softmax's and online softmax's
    shifted scores): then exp takes the library's exp of non-positive
    arguments, as the library's softmax and attention do."""
    if not (isinstance(node, Bin) and node.op == "sub"):
        return False
    a = node.a
    ids = {id(a)}
    mat = a.__dict__.get("mat")
    if mat is not None:
        ids.add(id(mat[0]))
    return bool(ids & bounds_of(node.b))


def irregular(node):
    """Whether an offset block's rows may not be visibly consecutive to the
    C compiler (a modulo, a division, a table of offsets, a select)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (Arr, Where, Load)) and n.shape:
            return True
        if isinstance(n, Bin) and n.op in ("mod", "floordiv", "truediv"):
            return True
        for attr in ("a", "b", "c"):
            child = getattr(n, attr, None)
            if isinstance(child, Node):
                stack.append(child)
    return False


def refs(node, out=None):
    """The Arr nodes `node` reads, and whether it reads any through a View."""
    out = set() if out is None else out
    stack = [node]
    viewed = False
    while stack:
        n = stack.pop()
        if isinstance(n, Arr):
            out.add(n.name)
        elif isinstance(n, View):
            viewed = True
            stack.append(n.a)
        else:
            for attr in ("a", "b", "c"):
                child = getattr(n, attr, None)
                if isinstance(child, Node):
                    stack.append(child)
            stack.extend(getattr(n, "more", ()))
            stack.extend(getattr(n, "deps", ()))
    return out, viewed


class Builder:
    """C statements of one program, with unique names and nested scopes."""

    def __init__(self):
        self.lines = []
        self.depth = 1
        self.count = 0
        self.checks = {}  # rowloop.versions' mask tests: key -> (name, scopes, assigns)
        self.assigns = 0  # carrier assignments so far (they may change what a test read)

    def mask_check(self, masks):
        """(C name, lines computing it) of a test that every element of
        each mask node in `masks` is true: O(1) where bounds of the
        compared integers are known (rowloop.all_true: offs < n), else a
        loop over the mask. A test made earlier of the same masks, in an
        open scope with no carrier assigned since, is reused (no lines)."""
        key = tuple(id(m) for m in masks)
        hit = self.checks.get(key)
        if hit is not None and tuple(_open_scopes[:len(hit[1])]) == hit[1] and hit[2] == self.assigns:
            return hit[0], []
        name = self.name("full")
        self.checks[key] = (name, tuple(_open_scopes), self.assigns, masks)
        lines = [f"int {name} = 1;"]
        saved, depth = self.lines, self.depth
        self.lines, self.depth = lines, 0
        try:
            for m in masks:
                e = rowloop.all_true(m)
                if e is not None:
                    self.line(f"{name} &= {e};")
                elif not m.shape:
                    self.line(f"{name} &= {emit(m, [])};")
                else:
                    self.loops(m.shape, lambda idx: f"{name} &= {emit(m, idx)};")
        finally:
            self.lines, self.depth = saved, depth
        return name, lines

    def name(self, prefix="v"):
        self.count += 1
        return f"{prefix}{self.count}"

    def line(self, text):
        self.lines.append("  " * self.depth + text)

    def loops(self, shape, body):
        """Nested loops over `shape`; body(idx) -> statement text."""
        idx = []
        opened = 0
        for n in shape:
            if n == 1:
                idx.append("0")
                continue
            i = self.name("i")
            self.line(f"for (int {i} = 0; {i} < {n}; ++{i}) {{")
            self.depth += 1
            opened += 1
            idx.append(i)
        self.line(body(idx))
        for _ in range(opened):
            self.depth -= 1
            self.line("}")

    def open_scope(self):
        self.count += 1
        _open_scopes.append(self.count)

    def close_scope(self):
        _open_scopes.pop()

    def materialise(self, node, mutable=False):
        if isinstance(node, Arr) and not mutable:
            return node
        if not mutable:
            mat = node.__dict__.get("mat")
            if mat is not None and tuple(_open_scopes[:len(mat[1])]) == mat[1]:
                return mat[0]
        d = node.dtype
        if not mutable and isinstance(node, Load):
            # a lazy load wanted whole after all (a dot's operand): its copy
            _mem.use(node)
            out = node.copy()
            node.mat = (out, tuple(_open_scopes))
            return out
        if not mutable and isinstance(node, View) and _transposed_load(node):
            # read memory in its own order, transpose in the array
            inner = self.materialise(node.a)
            return self.materialise(View(inner, node.shape, node.src))
        if not mutable and rowloop.fits(node):
            # float32 rows computed 16 lanes at a time (exp of non-positive
            # arguments with the library's vector exp), in a loop later
            # reductions over the block join (rowloop.py)
            v = self.name()
            self.line(f"float {v}[{numel(node.shape)}] __attribute__((aligned(64)));")
            out = Arr(v, node.shape, d)
            out.producer = rowloop.RowLoop(self, node, v)
            self.lines.append(out.producer)
            node.mat = (out, tuple(_open_scopes))
            if "bounds" in node.__dict__:
                out.bounds = node.bounds | {id(node)}
            return out
        if isinstance(node, Un) and node.op == "exp_neg" and node.shape and d is core.float32:
            v = self.name()
            self.line(f"float {v}[{numel(node.shape)}] __attribute__((aligned(64)));")
            arg = self.materialise(node.a)
            self.line(f"loom_tile_exp_neg_n({arg.name}, {v}, {numel(node.shape)});")
            out = Arr(v, node.shape, d)
            if mutable:
                m = self.name()
                self.line(f"float {m}[{numel(node.shape)}] __attribute__((aligned(64)));")
                self.line(f"for (int j = 0; j < {numel(node.shape)}; ++j) {m}[j] = {v}[j];")
                return Arr(m, node.shape, d)
            node.mat = (out, tuple(_open_scopes))
            return out
        if not node.shape:
            if isinstance(node, Sca) and not mutable and _is_name(node.expr):
                return node
            v = self.name()
            self.line(f"{'' if mutable else 'const '}{d.ctype} {v} = {emit(node, [])};")
            out = Arr(v, (), d) if mutable else Sca(v, d)
        else:
            v = self.name()
            self.line(f"{d.ctype} {v}[{numel(node.shape)}] __attribute__((aligned(64)));")
            self.loops(node.shape, lambda idx: f"{v}[{flat(node.shape, idx)}] = {emit(node, idx)};")
            out = Arr(v, node.shape, d)
        if not mutable:
            node.mat = (out, tuple(_open_scopes))
            if "bounds" in node.__dict__:
                out.bounds = node.bounds | {id(node)}
        return out

    def reduce_rows(self, node, op, whole):
        """The sum, max or min of a float32 block along its last dim (of
        all of it when `whole`) as a C name, computed in the loop that
        computes the block when that loop is still open to it, or in one
        loop over the lazy block; None where neither applies (the caller
        reduces a materialised array)."""
        if not rowloop.reducible(node, op, whole):
            return None
        target = node
        mat = node.__dict__.get("mat")
        if mat is not None and tuple(_open_scopes[:len(mat[1])]) == mat[1]:
            target = mat[0]
        if isinstance(target, Arr):
            loop = target.__dict__.get("producer")
            if loop is None or tuple(_open_scopes[:len(loop.scopes)]) != loop.scopes:
                return None
            return loop.reduce(self, op, whole)
        loop = rowloop.RowLoop(self, target, None)
        self.lines.append(loop)
        return loop.reduce(self, op, whole)

    def offsets(self, node):
        """`node` (an integer block) materialised as int64, and the name of
        an int that is 1 when each row (last dim) holds consecutive
        offsets: loads and stores through it then run contiguous."""
        c = node.__dict__.get("contig")
        if c is not None and tuple(_open_scopes[:len(c[2])]) == c[2]:
            return c[0], c[1]
        src = node if node.dtype.bits == 64 and node.dtype.kind == "i" else Cast(node, core.int64)
        arr = self.materialise(src)
        cols = node.shape[-1]
        rows = numel(node.shape) // cols
        flag = self.name("contig")
        self.line(f"int {flag} = 1;")
        self.line(f"for (int r = 0; r < {rows}; ++r) for (int j = 1; j < {cols}; ++j) "
                  f"{flag} &= {arr.name}[r * {cols} + j] == {arr.name}[r * {cols}] + j;")
        node.contig = (arr, flag, tuple(_open_scopes))
        return arr, flag

    def assign(self, dest: Arr, node):
        """dest = node (converted to dest's dtype, broadcast to its shape)."""
        self.assigns += 1
        if not dest.shape:
            self.line(f"{dest.name} = {convert(emit(node, []), node.dtype, dest.dtype)};")
            return
        names, viewed = refs(node)
        if dest.name in names and viewed:
            node = self.materialise(node)
        self.loops(dest.shape, lambda idx: f"{dest.name}[{flat(dest.shape, idx)}] = "
                   f"{convert(emit(node, sub_idx(node, dest.shape, idx)), node.dtype, dest.dtype)};")


def _row_constant(node, shape):
    """Whether `node`, broadcast to `shape`, is constant along the last dim."""
    if not node.shape:
        return True
    return len(node.shape) == len(shape) and node.shape[-1] == 1


def _may_trap(node):
    """Whether computing lazy `node` may trap: an integer division or
    remainder (by zero, or INT_MIN by -1), which a where() may guard."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Arr):
            continue
        if isinstance(n, Bin) and n.op in ("floordiv", "mod", "truediv") and \
                getattr(n, "operand_dtype", n.dtype).kind in "iub":
            return True
        for attr in ("a", "b", "c"):
            child = getattr(n, attr, None)
            if isinstance(child, Node):
                stack.append(child)
        stack.extend(getattr(n, "more", ()))
    return False


def _transposed_load(view):
    """Whether `view` reads a lazy load with its dims reordered."""
    src = [k for k, n in zip(view.src, view.a.shape) if n != 1]
    return isinstance(view.a, Load) and src != sorted(src)


def _is_name(expr):
    return expr.replace("_", "a").isalnum() and not expr[0].isdigit()
