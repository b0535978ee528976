"""Row loops: a float32 block computed 16 lanes at a time, row by row
(its last dim), with the sums, maxima and minima over it folded into the
same loop.

A block is materialised (or reduced without being stored) by one such
loop, placed in the program's lines as an object and written out as C
only when the program is complete: a reduction over the block asked for
later, in the same scope, joins the loop that computes it instead of
reading the stored block again (softmax's exp and its sum, flash
attention's probabilities and their row sums are one pass). Each chunk of
16 elements is computed into a small buffer (one vector register), the
exp of non-positive arguments (x - max x) is the library's vector exp,
and each reduction folds the chunk into 16 lanes.

The lanes' order is loom_tile_sumf's, maxf's and minf's (csource.py):
for a sum, lane l of 32 (two accumulators of 16, chunks alternating
between them) takes the elements at l mod 32 in order; maxima and minima
keep one accumulator of 16 lanes (elements at l mod 16); then lanes fold
pairwise (l with l + 16, 8, 4, 2, 1), so a reduction gives the same bits
fused, over a lazy block, or over a stored array, with AVX-512 or
without.
"""

from __future__ import annotations

import re

from . import core
from . import nodes as N

LANES = 16
_INIT = {"sum": "0.0f", "max": "-INFINITY", "min": "INFINITY"}


def _rows_fit(shape):
    """Rows of 16 or a multiple of 32 (chunk pairs) elements."""
    return bool(shape) and (shape[-1] == LANES or shape[-1] % (2 * LANES) == 0)


def fits(node):
    """Whether `node` (lazy) is computed by a row loop when materialised:
    float32, rows of 16 or a multiple of 32."""
    return _rows_fit(node.shape) and node.dtype is core.float32 and not isinstance(node, N.Arr)


def reducible(node, op, whole):
    """Whether the reduction `op` over `node`'s rows (all of it when
    `whole`) joins a row loop: not a whole block of several rows of 16
    (its lanes would alternate by row)."""
    shape = node.shape
    if whole and shape and shape[-1] == LANES and N.numel(shape) > LANES:
        return False
    return op in _INIT and _rows_fit(shape) and node.dtype is core.float32


def _row_index(shape, r):
    """Index expressions of the leading dims of row `r` of `shape`."""
    lead = shape[:-1]
    rows = N.numel(lead)
    idx, stride = [], rows
    for n in lead:
        stride //= n
        if n == 1:
            idx.append("0")
            continue
        e = r if stride == 1 else f"({r} / {stride})"
        idx.append(e if stride * n == rows else f"({e} % {n})")
    return idx


#: Before a loop over 16 lanes: vectorized as it stands, not unrolled first.
VECTOR_LOOP = ["#pragma GCC ivdep", "#pragma GCC unroll 1"]


def versions(pad, check, body):
    """C lines choosing between body(True) (lazy loads read without their
    masks) and body(False) by `check` (Builder.mask_check: C name, and the
    lines computing it): the usual case, rows whose masks are all true,
    then vectorizes without chains of masked loads."""
    if check is None:
        return body(False)
    name, lines = check
    out = [pad + x for x in lines]
    out.append(f"{pad}if ({name}) {{")
    out += ["  " + x for x in body(True)]
    out.append(f"{pad}}} else {{")
    out += ["  " + x for x in body(False)]
    out.append(f"{pad}}}")
    return out


def _int_range(n):
    """C expressions (int64) of the least and greatest element of integer
    block `n`, or None where they are not plain to see."""
    if isinstance(n, N.View):
        return _int_range(n.a)
    if isinstance(n, N.Range):
        return f"INT64_C({n.start})", f"INT64_C({n.start + n.shape[0] - 1})"
    if n.dtype.kind not in "iu":
        return None
    if isinstance(n, N.Sca) or (isinstance(n, N.Arr) and not n.shape):
        e = n.expr if isinstance(n, N.Sca) else n.name
        return f"(int64_t)({e})", f"(int64_t)({e})"
    if isinstance(n, N.Cast):
        if n.a.dtype.kind not in "iu" or n.a.dtype.bits > n.dtype.bits:
            return None
        return _int_range(n.a)
    if isinstance(n, N.Bin) and n.op in ("add", "sub", "mul"):
        a, b = _int_range(n.a), _int_range(n.b)
        if a is None or b is None:
            return None
        if n.op == "add":
            return f"({a[0]} + {b[0]})", f"({a[1]} + {b[1]})"
        if n.op == "sub":
            return f"({a[0]} - {b[1]})", f"({a[1]} - {b[0]})"
        if a[0] == a[1]:
            a, b = b, a
        if b[0] == b[1]:  # times a scalar of either sign
            return (f"LOOM_TILE_MIN({a[0]} * {b[0]}, {a[1]} * {b[0]})",
                    f"LOOM_TILE_MAX({a[0]} * {b[0]}, {a[1]} * {b[0]})")
    return None


def _fits(n, r):
    """C test that the range r of int block n fits its dtype (no element
    wrapped, so the bounds hold element by element)."""
    if n.dtype.bits >= 64:
        return "1"
    lo, hi = -(2 ** (n.dtype.bits - 1)), 2 ** (n.dtype.bits - 1) - 1
    if n.dtype.kind == "u":
        lo, hi = 0, 2 ** n.dtype.bits - 1
    return f"({r[0]} >= INT64_C({lo}) && {r[1]} <= INT64_C({hi}))"


def all_true(m):
    """A C expression that is 1 only if every element of mask block `m` is
    true, in O(1) (comparisons of integers of known bounds, joined by &),
    or None."""
    while isinstance(m, N.View):
        m = m.a
    if isinstance(m, N.Bin) and m.op in ("and", "logical_and"):
        a, b = all_true(m.a), all_true(m.b)
        return None if a is None or b is None else f"({a} && {b})"
    if isinstance(m, N.Bin) and m.op in ("lt", "le", "gt", "ge"):
        a, b = _int_range(m.a), _int_range(m.b)
        if a is None or b is None:
            return None
        test = {"lt": f"{a[1]} < {b[0]}", "le": f"{a[1]} <= {b[0]}",
                "gt": f"{a[0]} > {b[1]}", "ge": f"{a[0]} >= {b[1]}"}[m.op]
        return f"({_fits(m.a, a)} && {_fits(m.b, b)} && {test})"
    return None


class RowLoop:
    """The loop computing `node` into the float32 array `dest` (None:
    only reductions), at the builder's current place and scope."""

    def __init__(self, b, node, dest):
        shape = node.shape
        self.shape, self.dest = shape, dest
        self.cols = shape[-1]
        self.rows = N.numel(shape) // self.cols
        self.pad = "  " * b.depth
        self.scopes = tuple(N._open_scopes)
        self.exp = isinstance(node, N.Un) and node.op == "exp_neg"
        value = node.a if self.exp else node
        self.r, self.i, self.l, self.t = b.name("r"), b.name("i"), b.name("l"), b.name("t")
        idx = self.idx = _row_index(shape, self.r) + [f"{self.i} + {self.l}"]
        self.text, self.raw, self.masks = N.masked_and_raw(
            lambda: N.convert(N.emit(value, N.sub_idx(value, shape, idx)), value.dtype, core.float32))
        self.check = b.mask_check(self.masks) if self.masks else None
        self.plain = None
        if dest is not None and not self.exp:
            # written as a plain loop unless a reduction joins it
            saved, depth = b.lines, b.depth
            b.lines, b.depth = [], 0
            b.loops(shape, lambda ix: f"{dest}[{N.flat(shape, ix)}] = {N.emit(node, ix)};")
            self.plain = b.lines
            b.lines, b.depth = saved, depth
        self.reductions = []  # (op, whole, C name)
        self.outs = []  # (raw, masked): C statements storing lane l (value t[l]) to memory too
        self.keep = True  # whether the loop fills its array (drop_unread)

    def reduce(self, b, op, whole):
        """The C name of the reduction `op` over each row (over the whole
        block when `whole`): a float, or a float array of one per row."""
        whole = whole or len(self.shape) == 1
        for o, w, name in self.reductions:
            if (o, w) == (op, whole):
                return N.Sca(name, core.float32) if w else N.Arr(name, self.shape[:-1], core.float32)
        name = b.name("red")
        self.reductions.append((op, whole, name))
        return N.Sca(name, core.float32) if whole else N.Arr(name, self.shape[:-1], core.float32)

    def names(self):
        """The C names this loop defines or writes (its reductions, its
        array, its mask test)."""
        out = {name for _, _, name in self.reductions}
        if self.dest is not None:
            out.add(self.dest)
        if self.check is not None:
            out.add(self.check[0])
        return out

    def __str__(self):
        if self.plain is not None and not self.reductions and not self.outs:
            return "\n".join(self.pad + line for line in self.plain)
        out = []
        depth = [0]

        def line(text):
            out.append(self.pad + "  " * depth[0] + text)

        r, i, l, t = self.r, self.i, self.l, self.t
        accs = {name: f"{name}_acc" for _, _, name in self.reductions}

        def start(op, name):
            line(f"loom_tv {accs[name]}0 = loom_tv_set1({_INIT[op]}), {accs[name]}1 = {accs[name]}0;")
            if op != "sum":
                line(f"loom_tn {accs[name]}n = 0;")

        def fold(op, name):
            a = accs[name]
            return f"loom_tv_fold2_{op}({a}0, {a}1{'' if op == 'sum' else f', {a}n'})"

        for op, whole, name in self.reductions:
            line(f"float {name}{'' if whole else f'[{self.rows}]'};")
            if whole:
                start(op, name)

        def chunk(raw, half):
            """One chunk of 16 lanes at i (the outer loop's i_o + 16 * half):
            its reductions go to accumulator `half` (lane = element mod 32)."""
            line("{")
            depth[0] += 1
            line(f"const int {i} = {i}_o + {16 * half};")
            line(f"float {t}[{LANES}] __attribute__((aligned(64)));")
            out.extend(VECTOR_LOOP)
            line(f"for (int {l} = 0; {l} < {LANES}; ++{l}) {t}[{l}] = {self.raw if raw else self.text};")
            if self.exp:
                line(f"loom_tile_exp16({t});")
            if self.dest is not None and self.keep:
                line(f"memcpy({self.dest} + {r} * {self.cols} + {i}, {t}, sizeof {t});")
            for raw_store, masked_store in self.outs:
                out.extend(VECTOR_LOOP)
                line(f"for (int {l} = 0; {l} < {LANES}; ++{l}) {raw_store if raw else masked_store}")
            if self.reductions:
                line(f"const loom_tv {t}v = loom_tv_load({t});")
                for op, whole, name in self.reductions:
                    k = half if op == "sum" else 0  # maxima and minima: one accumulator
                    line(f"{accs[name]}{k} = loom_tv_{op}({accs[name]}{k}, {t}v);")
                    if op != "sum":
                        line(f"{accs[name]}n = loom_tv_nan({accs[name]}n, {t}v);")
            depth[0] -= 1
            line("}")

        def body(raw):
            keep = len(out)
            line("{")
            depth[0] += 1
            if self.rows > 1:
                line(f"for (int {r} = 0; {r} < {self.rows}; ++{r}) {{")
                depth[0] += 1
            else:
                line(f"const int {r} = 0; (void){r};")
            for op, whole, name in self.reductions:
                if not whole:
                    start(op, name)
            # chunk pairs where a sum alternates its two accumulators; else
            # one chunk a step (a maximum's loop, read from memory, measured
            # about twice the library's row_max cycles as pairs)
            pairs = self.cols > LANES and any(op == "sum" for op, _, _ in self.reductions)
            line(f"for (int {i}_o = 0; {i}_o < {self.cols}; {i}_o += {2 * LANES if pairs else LANES}) {{")
            depth[0] += 1
            chunk(raw, 0)
            if pairs:  # else the second accumulator keeps its start value
                chunk(raw, 1)
            depth[0] -= 1
            line("}")
            for op, whole, name in self.reductions:
                if not whole:
                    line(f"{name}[{r}] = {fold(op, name)};")
            if self.rows > 1:
                depth[0] -= 1
                line("}")
            depth[0] -= 1
            line("}")
            lines = out[keep:]
            del out[keep:]
            return lines

        out.extend(versions(self.pad + "  " * depth[0], self.check, body))
        for op, whole, name in self.reductions:
            if whole:
                line(f"{name} = {fold(op, name)};")
        return "\n".join(out)


def drop_unread(lines):
    """Row loops that store their block to memory (RowLoop.outs) fill their
    array only where a line of the program reads it."""
    loops = [x for x in lines if isinstance(x, RowLoop) and x.outs and x.dest is not None]
    for loop in loops:
        decl = f"float {loop.dest}["
        word = re.compile(rf"\b{loop.dest}\b")
        loop.keep = any(word.search(str(x)) for x in lines
                        if x is not loop and not (isinstance(x, str) and x.lstrip().startswith(decl)))
