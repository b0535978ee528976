"""Whether a traced kernel is row-wise in the sense of kernels/registry.h's
row maps, and the C of its map.

A kernel is row-wise when the tracer can prove, from the pointer
expressions it saw, that program p (of a 1-d grid) touches

- of each *row* tensor, exactly the elements [p*n, (p+1)*n): every
  access is ``T + p*S + tl.arange(0, B)`` masked by ``arange < n`` (``n``
  an int argument or B itself), S and n the same for all of them; a store
  so writes the whole row;
- of each *per-row* tensor, element p only (``T + p``, no mask: a row's
  statistic), read or written, not both (the tensor must have exactly one
  element a row);
- of each *whole* tensor, only reads, at offsets that do not depend on p
  (``T + tl.arange(0, B)`` masked by ``arange < m``, or ``T`` itself);

with no access under a run-time ``if`` or ``for`` (a strided loop over
programs, an early return), no other program id, and every offset built
from the program id, int arguments, literals and aranges by + - * and
integer casts (a loaded value in an address, ``% M`` or ``//`` leave the
kernel without a map). Each program's result then depends on its row
alone, whatever the split. What tracing cannot know is checked by the map
at run time (``<kernel>_rows``): a 1-d grid whose size is the launch
range, S == n <= B, range * n below 2^31 (int32 offsets cannot wrap), and
per-row and whole tensors dense and as large as the accesses need; the
host driver checks the row tensors are contiguous, range * n elements.
A map that does not hold returns 0: the launch runs as it is."""

from __future__ import annotations

from . import core
from . import nodes as N

PID = "pid0"


# ---- offsets as polynomials ----------------------------------------------------------
# A polynomial: {monomial: int coefficient}, a monomial a sorted tuple of
# symbols (PID, or an int argument's name), () the constant.

def _add(a, b, sign=1):
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
        if not out[m]:
            del out[m]
    return out


def _mul(a, b):
    out = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            if len(m) > 2:
                return None
            out[m] = out.get(m, 0) + ca * cb
            if not out[m]:
                del out[m]
    return out


def scalar_sym(node):
    """The polynomial a scalar node computes, or None."""
    if isinstance(node, bool):
        return None
    if isinstance(node, int):
        return {(): node} if node else {}
    if not isinstance(node, N.Node) or node.shape:
        return None
    s = node.__dict__.get("sym")
    if s is not None:
        return s
    if isinstance(node, N.Cast):
        return scalar_sym(node.a) if node.dtype.kind == "i" and node.a.dtype.kind == "i" else None
    if isinstance(node, N.Un) and node.op == "neg":
        a = scalar_sym(node.a)
        return None if a is None else {m: -c for m, c in a.items()}
    if isinstance(node, N.Bin) and node.dtype.kind == "i":
        a, b = scalar_sym(node.a), scalar_sym(node.b)
        if a is None or b is None:
            return None
        if node.op == "add":
            return _add(a, b)
        if node.op == "sub":
            return _add(a, b, -1)
        if node.op == "mul":
            return _mul(a, b)
    return None


def block_sym(node):
    """A 1-d integer block as (polynomial, B): the polynomial plus
    tl.arange(0, B) (B None: no arange; the polynomial is the same for
    every element), or None."""
    if not isinstance(node, N.Node):
        return None
    if not node.shape:
        s = scalar_sym(node)
        return None if s is None else (s, None)
    if len(node.shape) != 1 or node.dtype.kind != "i":
        return None
    if isinstance(node, N.Range):
        return ({}, node.shape[0]) if node.start == 0 else None
    if isinstance(node, N.View):
        if not node.a.shape:
            s = scalar_sym(node.a)
            return None if s is None else (s, None)
        if tuple(node.a.shape) == tuple(node.shape) and tuple(node.src) == (0,):
            return block_sym(node.a)
        return None
    if isinstance(node, N.Cast):
        return block_sym(node.a) if node.a.dtype.kind == "i" else None
    if isinstance(node, N.Bin) and node.op in ("add", "sub"):
        a, b = block_sym(node.a), block_sym(node.b)
        if a is None or b is None:
            return None
        if node.op == "sub":
            if b[1] is not None:
                return None
            return _add(a[0], b[0], -1), a[1]
        if a[1] is not None and b[1] is not None:
            return None
        return _add(a[0], b[0]), a[1] if a[1] is not None else b[1]
    return None


def _bound(mask):
    """`mask` as tl.arange(0, B) < m: (B, m's polynomial), or None."""
    if not isinstance(mask, N.Bin) or mask.op != "lt" or len(mask.shape) != 1:
        return None
    a, m = block_sym(mask.a), scalar_sym(mask.b)
    if a is None or m is None or a[0] or a[1] is None:
        return None
    if any(len(k) > 1 or PID in k for k in m):
        return None
    return a[1], m


# ---- the proof -----------------------------------------------------------------------

class Access:
    __slots__ = ("kind", "tensor", "soff", "boff", "mask", "shape", "control")

    def __init__(self, kind, tensor, soff, boff, mask, shape, control):
        self.kind, self.tensor, self.soff, self.boff = kind, tensor, soff, boff
        self.mask, self.shape, self.control = mask, tuple(shape), control


class RowMap:
    """What the proof found: the row length (a polynomial of int
    arguments), the block B, the row stride polynomials, and the roles of
    the tensors (indices among the tensor arguments)."""

    def __init__(self):
        self.n = None
        self.block = None
        self.strides = []
        self.rows, self.per_row, self.whole, self.written = set(), set(), set(), set()
        self.whole_need = {}  # tensor -> [polynomial of elements needed]


def prove(tracer):
    """A RowMap if the traced kernel is row-wise, else None."""
    if tracer.control or tracer.other_pid:
        return None
    rm = RowMap()
    read_per_row = set()
    for a in tracer.accesses:
        if a.control:
            return None
        off = _offset(a)
        if off is None:
            return None
        poly, b = off
        pid_terms = {m: c for m, c in poly.items() if PID in m}
        rest = {m: c for m, c in poly.items() if PID not in m}
        if b is not None:  # a block access
            if a.shape != (b,) or rest:
                return None
            if a.mask is None:
                bound = (b, {(): b})
            else:
                bound = _bound(a.mask)
                if bound is None or bound[0] != b:
                    return None
            if pid_terms:  # a row: pid * S + arange, masked by arange < n
                stride = {tuple(x for x in m if x != PID): c for m, c in pid_terms.items()}
                if rm.n is None:
                    rm.n, rm.block = bound[1], b
                elif rm.n != bound[1] or rm.block != b:
                    return None
                if stride not in rm.strides:
                    rm.strides.append(stride)
                rm.rows.add(a.tensor)
            else:
                if a.kind == "store":
                    return None
                rm.whole.add(a.tensor)
                rm.whole_need.setdefault(a.tensor, []).append(("min", b, bound[1]))
        else:  # a scalar access
            if a.mask is not None or a.shape:
                return None
            if pid_terms:
                if poly != {(PID,): 1}:
                    return None
                rm.per_row.add(a.tensor)
                if a.kind == "load":
                    read_per_row.add(a.tensor)
            else:
                if a.kind == "store" or any(m for m in rest):
                    return None
                c = rest.get((), 0)
                if c < 0:
                    return None
                rm.whole.add(a.tensor)
                rm.whole_need.setdefault(a.tensor, []).append(("const", c + 1, None))
        if a.kind == "store":
            rm.written.add(a.tensor)
    if rm.n is None:
        return None  # no rows at all
    roles = [rm.rows, rm.per_row, rm.whole]
    for i, r in enumerate(roles):
        for other in roles[i + 1:]:
            if r & other:
                return None
    if rm.whole & rm.written or (rm.per_row & rm.written & read_per_row):
        return None
    return rm


def _offset(a):
    """An access's offset: (polynomial, B or None)."""
    s = scalar_sym(a.soff) if a.soff is not None else {}
    if s is None:
        return None
    if a.boff is None:
        return s, None
    b = block_sym(a.boff)
    if b is None:
        return None
    return _add(s, b[0]), b[1]


# ---- the map's C ---------------------------------------------------------------------

def _c_poly(poly, scalar_index):
    terms = []
    for m, c in sorted(poly.items()):
        factors = [f"(int64_t){c}"]
        for sym in m:
            k = scalar_index.get(sym)
            if k is None:
                return None
            factors.append(f"A->scalars[{k}].i")
        terms.append(" * ".join(factors))
    return " + ".join(terms) if terms else "(int64_t)0"


def c_function(rm, name, scalar_index, n_scalars, n_tensors):
    """The C of `<name>` with loom_row_map_fn's signature (struct
    loom_row_map declared in the source, as kernels/registry.h has it).
    scalar_index: an int argument's name -> its index in A->scalars."""
    n = _c_poly(rm.n, scalar_index)
    strides = [_c_poly(s, scalar_index) for s in rm.strides]
    if n is None or any(s is None for s in strides):
        return None
    checks = [f"(int64_t)({s}) != n" for s in strides]
    lines = []
    for t in sorted(rm.rows):
        lines.append(f"  if (!loom_tile_dense(&A->tensors[{t}], A->range * n)) return 0;")
    for t in sorted(rm.per_row):
        # exactly one element a row: a written one goes to scratch while
        # its group runs, and the whole span is copied back after it
        lines.append(f"  if (!loom_tile_dense(&A->tensors[{t}], A->range) || "
                     f"loom_tile_numel(&A->tensors[{t}]) != A->range) return 0;")
    for t in sorted(rm.whole):
        for kind, b, m in rm.whole_need[t]:
            if kind == "const":
                need = str(b)
            else:
                mc = _c_poly(m, scalar_index)
                if mc is None:
                    return None
                need = f"loom_tile_min((int64_t){b}, (int64_t)({mc}))"
            lines.append(f"  if (!loom_tile_dense(&A->tensors[{t}], {need})) return 0;")
    mask = lambda s: " | ".join(f"1u << {t}" for t in sorted(s)) or "0u"  # noqa: E731
    check = " || ".join(checks) or "0"
    body = "\n".join(lines)
    return f"""
struct loom_row_map {{ int64_t n; uint32_t row_tensors, whole_tensors, written; }};

static int64_t loom_tile_min(int64_t a, int64_t b) {{ return a < b ? a : b; }}

/* Whether `t` is dense in row-major order with at least `need` elements. */
static int loom_tile_dense(const loom_tensor *t, int64_t need) {{
  if (need <= 0) return 1;
  if (!t->data || t->rank < 0 || t->rank > LOOM_MAX_DIMS) return 0;
  int64_t expect = 1, count = 1;
  for (int32_t d = t->rank - 1; d >= 0; --d) {{
    if (t->sizes[d] <= 0) return 0;
    if (t->sizes[d] != 1 && t->strides[d] != expect) return 0;
    if (t->sizes[d] > INT64_MAX / expect) return 0;
    expect *= t->sizes[d];
    count = expect;
  }}
  return count >= need;
}}

static int64_t loom_tile_numel(const loom_tensor *t) {{
  int64_t count = 1;
  for (int32_t d = 0; d < t->rank; ++d) count *= t->sizes[d];
  return count;
}}

/* The row map (kernels/registry.h) of the kernel: program p walks row p. */
int {name}(const loom_kernel_args *A, struct loom_row_map *out) {{
  if (A->num_scalars < {n_scalars} || A->num_tensors < {n_tensors}) return 0;
  if (A->scalars[0].i != A->range || A->scalars[1].i != 1 || A->scalars[2].i != 1) return 0;
  const int64_t n = (int64_t)({n});
  if (n <= 0 || n > {rm.block} || A->range <= 0 || A->range > INT32_MAX / n) return 0;
  if ({check}) return 0;
{body}
  out->n = n;
  out->row_tensors = {mask(rm.rows)};
  out->whole_tensors = {mask(rm.whole)};
  out->written = {mask(rm.written)};
  return 1;
}}
"""


def scalar_indices(specs, params):
    """An int argument's name -> its index in A->scalars (after the grid's
    three), as the tracer numbers them."""
    out, k = {}, 3
    for name, spec in zip(params, specs):
        if spec[0] in ("int", "float"):
            if spec[0] == "int":
                out["$" + name] = k
            k += 1
    return out, k


__all__ = ["prove", "c_function", "scalar_indices", "Access", "RowMap", "PID", "core"]
