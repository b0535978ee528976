"""Fusion: the graph IR -> units (fused kernels and library calls) in an
order that respects every dependency.

A kernel has an iteration space of dims (sizes > 1): the first n_outer are
the parallel outer space O, the rest the reduced space R (none in a
pointwise kernel: O is all). Each value a kernel computes has an
*embedding*, for each of its dims the kernel dim it runs along (None for a
size-1 dim), and a space: F (one value per element of O x R) or O (one per
outer index). Nodes are placed greedily in graph order:

- a pointwise node joins the kernel of an operand's producer when its dims
  embed there consistently with every operand computed in that kernel: as
  F (a chain, a prologue of a reduction, or an op over a row that uses the
  row's reductions, like x - max(x)) or as O (an epilogue of a reduction);
  kernels of its other operands merge in when they are pointwise,
  independent of it and cover the same space (two chains meeting);
- a reduction joins the kernel of its operand when the operand is F there:
  a pointwise kernel becomes a reduction kernel (its dims reordered to the
  operand's kept dims, then its reduced dims), a reduction kernel takes it
  when it reduces the same dims (var after mean, softmax's sum after its
  max: a later pass over each row);
- otherwise the node starts a kernel of its own; library nodes are units
  of their own.

No join may create a cycle between units: a node whose other operands come
from units that depend on the kernel starts a new one. Values used outside
their kernel (or returned) are stored; the rest never reach memory.
"""

from __future__ import annotations

import torch

from . import ir
from .ir import Library, Pointwise, Reduce, Ref

F, O = "F", "O"


#: Elements of a pointwise kernel up to which one that reads no kernel's
#: result joins the latest such kernel of the same dims (horizontal fusion:
#: a launch for many tiny independent updates instead of one each).
SMALL_SIBLINGS = 4096

#: Bytes a pointwise kernel of one ATen call writes from which it runs as
#: that call: the library streams such outputs past the cache
#: (base/stream_store.h, LOOM_STREAM_STORE_BYTES).
STREAM_BYTES = 32 * 1024 * 1024

#: Elements a reduction kernel of one ATen call reads from which it runs as
#: that call (as a column sum of a tensor in memory does: ops.py).
LIBRARY_REDUCE_MIN = 16384

#: Outputs below which such a reduction is the library's.
FEW_OUTPUTS = 16


class Kernel:
    def __init__(self, uid, dims):
        self.uid = uid
        self.dims = list(dims)
        self.n_outer = len(self.dims)
        self.reduces = False
        self.members = []
        self.emb = {}      # Value -> tuple: per dim, kernel dim or None
        self.space = {}    # Value -> F or O
        self.level = {}    # F: passes whose results it needs; O: pass after which it exists
        self.in_emb = {}   # Reduce node -> embedding of its operand's dims
        self.deps = set()
        self.writes = set()  # graph inputs it writes into (Value.alias)

    def __repr__(self):
        return f"<kernel {self.uid} dims={self.dims} outer={self.n_outer} ops={len(self.members)}>"


class LibraryUnit:
    def __init__(self, uid, node):
        self.uid = uid
        self.node = node
        self.members = [node]
        self.deps = set()


def _returns_alias(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _producer(v):
    p = v.producer
    return None if p is None or isinstance(p, (ir.Input, ir.Constant)) else p


class Fuser:
    def __init__(self, graph: ir.Graph, log=None):
        self.graph = graph
        self.units = []
        self.unit_of = {}
        self.position = {n: i for i, n in enumerate(graph.nodes)}
        self.log = log
        self._uids = 0
        self.siblings = {}  # dims -> the latest small pointwise kernel of those dims
        self.singles = 0    # kernels run as their ATen call (library_singles)

    # ---- units and dependencies -------------------------------------------------------

    def unit(self, v):
        p = _producer(v)
        return None if p is None else self.unit_of[p]

    def _new_uid(self):
        self._uids += 1
        return self._uids

    def depends(self, a, b) -> bool:
        """Whether unit a needs unit b (transitively)."""
        if a is b:
            return True
        seen, stack = set(), [a]
        while stack:
            u = stack.pop()
            for d in u.deps:
                if d is b:
                    return True
                if d.uid not in seen:
                    seen.add(d.uid)
                    stack.append(d)
        return False

    def add_member(self, k, node):
        k.members.append(node)
        self.unit_of[node] = k
        for v in node.inputs:
            u = self.unit(v)
            if u is not None and u is not k:
                k.deps.add(u)

    # ---- placement --------------------------------------------------------------------

    def run(self):
        for n in self.graph.nodes:
            if isinstance(n, (ir.Input, ir.Constant)):
                continue
            if isinstance(n, Library):
                u = LibraryUnit(self._new_uid(), n)
                self.units.append(u)
                self.add_member(u, n)
                if getattr(getattr(n.target, "_schema", None), "is_mutable", True):
                    self.order_mutation(u, n)
            elif isinstance(n, Pointwise):
                self.place_pointwise(n)
            elif isinstance(n, Reduce):
                self.place_reduce(n)
        self.library_singles()
        for k in self.units:
            if isinstance(k, Kernel) and not k.reduces:
                self.memory_order(k)
        return self

    # ---- kernels of one ATen call --------------------------------------------------------

    def library_singles(self):
        """A kernel computing one ATen call alone from tensors in memory
        fuses nothing; where the library's kernel is the stronger one it
        runs that call instead (eager's kernel, eager's bits):
        - a reduction of at least LIBRARY_REDUCE_MIN elements into fewer
          than FEW_OUTPUTS outputs: the library splits such a reduction
          across the workers where a generated kernel gives each output
          one worker (a full sum of 16M float32: one worker, 0.73x eager),
          and sums float32 in blocks as eager does (eager's bits, where the
          generated double lanes may differ in the last place). A fixed
          count, not the worker count, decides: the bits never depend on
          the threads;
        - a pointwise op writing at least STREAM_BYTES: the library streams
          such an output past the cache (2 x 16M float32 add: 35 GB/s
          against the generated loop's 29)."""
        for k in list(self.units):
            origin = self.single_origin(k)
            if origin is None:
                continue
            if k.reduces:
                if _numel(k.dims) < LIBRARY_REDUCE_MIN or \
                        _numel(k.dims[:k.n_outer]) >= FEW_OUTPUTS:
                    continue
            elif sum(v.numel * v.dtype.itemsize for v in self.stored(k)) < STREAM_BYTES:
                continue
            self.as_library(k, origin)

    def single_origin(self, k):
        """The ATen call kernel k computes alone, with every tensor it
        reads already in memory, or None."""
        if not isinstance(k, Kernel) or k.writes:
            return None
        origin = getattr(k.members[0], "origin", None)
        if origin is None or set(k.members) != set(origin.nodes):
            return None
        if not isinstance(getattr(origin.target, "_schema", None), torch._C.FunctionSchema):
            return None
        results = origin.result if isinstance(origin.result, (tuple, list)) else [origin.result]
        if not all(isinstance(v, ir.Value) and v.alias is None and v.producer in k.members
                   for v in results):
            return None
        if set(self.stored(k)) != set(results):
            return None
        for v in Library(origin.target, origin.args, origin.kwargs).inputs:
            p = v.producer
            if not isinstance(p, (ir.Input, ir.Constant)) and p not in self.unit_of:
                return None  # a view or a fill kernels read through: never made
        return origin

    def as_library(self, k, origin):
        """Kernel k becomes a library unit running `origin`'s call."""
        multi = isinstance(origin.result, (tuple, list))
        results = list(origin.result) if multi else [origin.result]
        lib = Library(origin.target, origin.args, origin.kwargs, outputs=results, multi=multi)
        lib.slots, lib.view, lib.const = results, None, None
        for v in results:
            v.producer = lib
        for v in lib.inputs:
            v.users = [u for u in v.users if u not in k.members] + [lib]
        pos = min(self.position[m] for m in k.members)
        self.graph.nodes = [n for n in self.graph.nodes if n not in k.members]
        self.graph.nodes.insert(min(pos, len(self.graph.nodes)), lib)
        self.position = {n: i for i, n in enumerate(self.graph.nodes)}
        u = LibraryUnit(k.uid, lib)
        u.deps = set(k.deps)
        for m in k.members:
            del self.unit_of[m]
        self.unit_of[lib] = u
        for v in lib.inputs:  # the call's own arguments: views kernels read through
            p = self.unit(v)
            if p is not None and p is not u:
                u.deps.add(p)
        self.units[self.units.index(k)] = u
        for other in self.units:
            if k in other.deps:
                other.deps.discard(k)
                other.deps.add(u)
        self.singles += 1

    def memory_order(self, k):
        """Pointwise kernel k's dims in the memory order of the first value
        it stores that runs along all of them (largest stride outermost):
        over channels-last tensors the kernel runs along the channels, one
        flat run where every argument has that layout, instead of a run of
        W strided elements at a time. Each element's arithmetic is the
        same in any order."""
        nd = len(k.dims)
        if nd < 2:
            return
        for v in self.stored(k):
            e = k.emb[v]
            if v.stride is not None and sorted(x for x in e if x is not None) == list(range(nd)):
                break
        else:
            return
        stride = {x: v.stride[j] for j, x in enumerate(e) if x is not None}
        order = sorted(range(nd), key=lambda d: -stride[d])
        if order == list(range(nd)):
            return
        perm = {old: new for new, old in enumerate(order)}
        for w, ew in k.emb.items():
            k.emb[w] = tuple(None if x is None else perm[x] for x in ew)
        k.dims = [k.dims[x] for x in order]

    def candidates(self, n):
        seen = []
        for v in n.inputs:
            u = self.unit(v)
            if isinstance(u, Kernel) and u not in seen:
                seen.append(u)
        return sorted(seen, key=lambda k: (not k.reduces, -k.uid))

    def place_pointwise(self, n):
        x = n.out.alias
        readers = self.readers(x, n) if x is not None else []
        cands = self.candidates(n)
        for k in cands:
            if self.try_join(n, k, cands, readers):
                return
        dims = tuple(s for s in n.out.shape if s != 1)
        small = not cands and _numel(dims) <= SMALL_SIBLINGS
        if small:
            k = self.siblings.get(dims)
            if k is not None and self.sibling_ok(n, k) and self.try_join(n, k, [], readers):
                return
        k = Kernel(self._new_uid(), list(dims))
        self.units.append(k)
        if small:
            self.siblings[dims] = k
        e, pos = [], 0
        for s in n.out.shape:
            e.append(None if s == 1 else pos)
            pos += 1 if s != 1 else 0
        self.record(k, n, tuple(e), F, 0)
        self.order_after(k, x, readers)

    def sibling_ok(self, n, k) -> bool:
        """Whether small pointwise n, which reads no kernel's result, may
        join k, the latest small pointwise kernel of its dims (a batch
        norm's running statistics, the step counters): k is still a
        pointwise unit and writes no input n reads."""
        if k.reduces or not any(u is k for u in self.units):
            return False
        for v in n.inputs:
            while isinstance(v.producer, Library) and _returns_alias(v.producer.target) \
                    and v.producer.inputs:
                v = v.producer.inputs[0]
            if v in k.writes:
                return False
        return True

    def readers(self, x, skip):
        """The nodes placed so far that read input x's memory, directly or
        through views of it."""
        found, stack = [], list(x.users)
        while stack:
            r = stack.pop()
            if r is skip or r in found or r not in self.unit_of:
                continue
            found.append(r)
            if isinstance(r, Library) and _returns_alias(r.target):
                for v in r.outputs:
                    stack.extend(v.users)
        return found

    def order_mutation(self, u, n):
        """A library op that may write its arguments runs after every unit
        placed so far that reads their memory."""
        for v in n.inputs:
            while isinstance(v.producer, Library) and _returns_alias(v.producer.target) \
                    and v.producer.inputs:
                v = v.producer.inputs[0]
            for r in self.readers(v, n):
                if self.unit_of[r] is not u:
                    u.deps.add(self.unit_of[r])

    def order_after(self, k, x, readers):
        """k writes input x: it runs after every unit that reads x."""
        if x is None:
            return
        k.writes.add(x)
        for r in readers:
            u = self.unit_of[r]
            if u is not k:
                k.deps.add(u)

    def in_place_ok(self, n, k, e, readers):
        """Whether n (writing an input) may join k: each reader of the
        input is in another unit that does not need k, or in k (a
        pointwise kernel) reading the very element n writes."""
        for r in readers:
            u = self.unit_of[r]
            if u is not k:
                if self.depends(u, k):
                    return False
                continue
            if k.reduces or not isinstance(r, Pointwise):
                return False
            er = k.emb[r.out]
            for o in r.operands:
                if isinstance(o, Ref) and o.value is n.out.alias:
                    read = tuple(None if (d is None or o.value.shape[j] == 1) else er[d]
                                 for j, d in enumerate(o.access))
                    if read != e:
                        return False
        return True

    def record(self, k, n, e, space, level):
        v = n.out
        k.emb[v], k.space[v], k.level[v] = e, space, level
        self.add_member(k, n)

    def embed(self, n, k):
        """(space, embedding, level) of pointwise n in k, or None."""
        rank = len(n.out.shape)
        e = [None] * rank
        level = 0
        for o in n.operands:
            if not isinstance(o, Ref) or o.value not in k.emb:
                continue
            w = o.value
            ew = k.emb[w]
            level = max(level, k.level[w])
            for j, d in enumerate(o.access):
                if w.shape[j] == 1:
                    continue
                if d is None:
                    return None
                if e[d] is None:
                    e[d] = ew[j]
                elif e[d] != ew[j]:
                    return None
        used = {x for x in e if x is not None}
        nonone = [d for d in range(rank) if n.out.shape[d] != 1]
        outer = set(range(k.n_outer))
        spaces = []
        if k.reduces and used <= outer:
            spaces.append((O, sorted(outer)))
        spaces.append((F, list(range(len(k.dims)))))
        for space, kdims in spaces:
            if len(nonone) != len(kdims) or not used <= set(kdims):
                continue
            if any(k.dims[e[d]] != n.out.shape[d] for d in nonone if e[d] is not None):
                continue
            free = [x for x in kdims if x not in used]
            left = [d for d in nonone if e[d] is None]
            if len(free) != len(left) or any(k.dims[x] != n.out.shape[d] for x, d in zip(free, left)):
                continue
            full = list(e)
            for x, d in zip(free, left):
                full[d] = x
            if space == O and any(k.space[o.value] == F for o in n.operands
                                  if isinstance(o, Ref) and o.value in k.emb):
                continue
            return space, tuple(full), level
        return None

    def try_join(self, n, k, cands, readers=()):
        placed = self.embed(n, k)
        if placed is None:
            return False
        space, e, level = placed
        for v in n.inputs:
            u = self.unit(v)
            if u is not None and u is not k and self.depends(u, k):
                return False
        if n.out.alias is not None and (space != F or not self.in_place_ok(n, k, e, readers)):
            return False
        for k2 in cands:
            if k2 is not k:
                self.try_merge(k2, k, n, e)
        level = max([level] + [k.level[o.value] for o in n.operands
                               if isinstance(o, Ref) and o.value in k.emb])
        self.record(k, n, e, space, level)
        self.order_after(k, n.out.alias, readers)
        return True

    def try_merge(self, k2, k, n, e):
        """Moves the pointwise kernel k2 into k, when n (about to join k
        with embedding e) reads it consistently and neither needs the other."""
        if k2.reduces or k.writes or k2.writes or self.depends(k, k2) or self.depends(k2, k):
            return False
        rename = {}
        for o in n.operands:
            if not isinstance(o, Ref) or o.value not in k2.emb:
                continue
            ew = k2.emb[o.value]
            for j, d in enumerate(o.access):
                if o.value.shape[j] == 1:
                    continue
                if rename.setdefault(ew[j], e[d]) != e[d]:
                    return False
        image = set(rename.values())
        if len(rename) != len(k2.dims) or len(image) != len(rename):
            return False
        if image == set(range(len(k.dims))):
            space = F
        elif k.reduces and image == set(range(k.n_outer)):
            space = O
        else:
            return False
        for m in k2.members:
            v = m.out
            k.emb[v] = tuple(None if x is None else rename[x] for x in k2.emb[v])
            k.space[v], k.level[v] = space, 0
            k.members.append(m)
            self.unit_of[m] = k
        k.members.sort(key=self.position.__getitem__)
        k.deps |= {d for d in k2.deps if d is not k}
        self.units.remove(k2)
        for u in self.units:
            if k2 in u.deps:
                u.deps.discard(k2)
                if u is not k:
                    u.deps.add(k)
        return True

    def place_reduce(self, n):
        v = n.operand.value
        k = self.unit(v)
        rank = len(v.shape)
        kept = [j for j in range(rank) if j not in n.dims and v.shape[j] != 1]
        red = [j for j in n.dims if v.shape[j] != 1]
        # (a kernel writing an input stays pointwise: a later pass would
        # read what the first one wrote)
        if isinstance(k, Kernel) and k.space.get(v) == F and not k.writes:
            ev = k.emb[v]
            outer, inner = [ev[j] for j in kept], [ev[j] for j in red]
            if not k.reduces:
                order = outer + inner
                perm = {old: new for new, old in enumerate(order)}
                for w, ew in k.emb.items():
                    k.emb[w] = tuple(None if x is None else perm[x] for x in ew)
                for r, ew in k.in_emb.items():
                    k.in_emb[r] = tuple(None if x is None else perm[x] for x in ew)
                k.dims = [k.dims[x] for x in order]
                k.n_outer, k.reduces = len(outer), True
                ok = True
            else:
                ok = sorted(inner) == list(range(k.n_outer, len(k.dims)))
            if ok:
                ev = k.emb[v]
                k.in_emb[n] = ev
                self.record(k, n, self._out_emb(n, ev), O, k.level[v] + 1)
                return
        k = Kernel(self._new_uid(), [v.shape[j] for j in kept] + [v.shape[j] for j in red])
        k.n_outer, k.reduces = len(kept), True
        self.units.append(k)
        ev = [None] * rank
        for pos, j in enumerate(kept + red):
            ev[j] = pos
        k.in_emb[n] = tuple(ev)
        self.record(k, n, self._out_emb(n, ev), O, 1)

    @staticmethod
    def _out_emb(n, ev):
        e = []
        for j in range(len(ev)):
            if j in n.dims:
                if n.keepdim:
                    e.append(None)
            else:
                e.append(ev[j])
        return tuple(e)

    # ---- the result ---------------------------------------------------------------------

    def schedule(self):
        """The units in an order where each follows those it needs
        (graph order among the ready ones)."""
        order, done = [], set()
        pending = sorted(self.units, key=lambda u: min(self.position[m] for m in u.members))
        while pending:
            for i, u in enumerate(pending):
                if all(d.uid in done for d in u.deps):
                    order.append(u)
                    done.add(u.uid)
                    del pending[i]
                    break
            else:
                raise AssertionError("loom compiler: a cycle between fused kernels")
        return order

    def stored(self, k):
        """The values of kernel k that must reach memory."""
        outs = {v for v in self.graph.outputs if v is not None}
        keep = []
        for m in k.members:
            v = m.out
            if v in outs or v.alias is not None or any(self.unit_of.get(u) is not k for u in v.users):
                keep.append(v)
        return keep


def _numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def _inline_operand(o, shape, pre):
    """Operand `o` of a pointwise node of `shape`: when a pointwise node
    makes it and the read broadcasts it, a clone of that node (and of the
    pointwise nodes it reads broadcast) computing it per element of
    `shape`; the clones go to `pre`."""
    if not isinstance(o, Ref) or not isinstance(o.value.producer, Pointwise):
        return o
    v = o.value
    if v.alias is not None or v.numel >= _numel(shape):
        return o
    p = v.producer
    operands = []
    for po in p.operands:
        if isinstance(po, Ref):
            composed = tuple(None if b is None else o.access[b] for b in po.access)
            po = _inline_operand(Ref(po.value, composed), shape, pre)
        operands.append(po)
    clone_out = ir.Value(shape, v.dtype, ir.contiguous_strides(shape), v.device, f"{v.name}_b")
    clone = Pointwise(p.op, operands, p.kind, p.params, outputs=[clone_out])
    clone_out.producer = clone
    pre.append(clone)
    return Ref(clone_out, tuple(None if x == 1 else d for d, x in enumerate(shape)))


def inline_broadcasts(graph: ir.Graph):
    """Pointwise values read broadcast by a larger pointwise node are
    recomputed per element there (the producer stays for its other readers,
    or goes): a kernel then never waits on a small one for a value it could
    compute itself, and the small value never reaches memory."""
    nodes = []
    for n in graph.nodes:
        if isinstance(n, Pointwise):
            pre = []
            n.operands = [_inline_operand(o, n.out.shape, pre) for o in n.operands]
            nodes.extend(pre)
        nodes.append(n)
    graph.nodes = nodes
    graph.relink()
    outs = {v for v in graph.outputs if v is not None}
    live = []
    for n in reversed(graph.nodes):
        dead = isinstance(n, Pointwise) and n.out.alias is None and n.out not in outs \
            and not n.out.users
        if not dead:
            live.append(n)
        else:
            for v in n.inputs:
                v.users = [u for u in v.users if u is not n]
    graph.nodes = live[::-1]


def fuse(graph: ir.Graph) -> Fuser:
    inline_broadcasts(graph)
    return Fuser(graph).run()
