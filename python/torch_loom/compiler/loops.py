"""A fused kernel (fuse.Kernel) -> the kernel IR (ir.LoopKernel): its tensor
arguments with their dimmaps, and its SSA statements placed per outer
index (``before``, each pass's ``after``) or per element of a pass over R.

A reduction computed in pass p needs its operand's F-space cone evaluated in
pass p; a value of the full space that must be stored is written in the
first pass after the reductions it needs (an extra pass when it needs the
last ones: a softmax's output). Loads of tensors made outside the kernel
are placed where their reader runs."""

from __future__ import annotations

from . import ir
from .fuse import F, O
from .ir import (Accumulate, Arg, Load, LoadScalar, LoopKernel, Op, Pass, Pointwise, Reduce,
                 Scalar, Store)


class _Builder:
    def __init__(self, fuser, k, name):
        self.fuser, self.k, self.name = fuser, k, name
        self.ids = {}
        self.types = {}
        self.args = []        # (Value, Arg)
        self.arg_index = {}   # (value id, dimmap, output) -> index
        self.loads = {}       # (arg index, row?) -> ssa id
        self.scalars = []     # Values passed as scalar arguments
        self.scalar_ids = {}  # Value -> ssa id (loaded in `before`)
        self.before = []

    def new_id(self, dtype):
        i = len(self.types)
        self.types[i] = dtype
        return i

    def value_id(self, v):
        if v not in self.ids:
            self.ids[v] = self.new_id(v.dtype)
        return self.ids[v]

    def arg(self, v, dimmap, output):
        key = (v.id, dimmap, output)
        if key not in self.arg_index:
            self.arg_index[key] = len(self.args)
            self.args.append((v, Arg(v.dtype, dimmap, output)))
        return self.arg_index[key]

    def operand_dimmap(self, node, j_access, shape):
        e = self.k.emb[node.out]
        return tuple(None if (d is None or shape[j] == 1) else e[d] for j, d in enumerate(j_access))

    def src(self, node, operand, row, out):
        """The SSA id (or Scalar) of an operand of `node`, appending loads
        of external tensors to `out`."""
        if isinstance(operand, Scalar):
            return operand
        v = operand.value
        if v in self.k.emb:
            return self.value_id(v)
        if v.device.type != "loom":  # a 0-dim CPU tensor: a scalar argument
            if v not in self.scalar_ids:
                self.scalar_ids[v] = self.new_id(v.dtype)
                self.before.append(LoadScalar(self.scalar_ids[v], len(self.scalars)))
                self.scalars.append(v)
            return self.scalar_ids[v]
        if isinstance(node, Reduce):
            dimmap = tuple(None if v.shape[j] == 1 else x for j, x in enumerate(self.k.in_emb[node]))
        else:
            dimmap = self.operand_dimmap(node, operand.access, v.shape)
        a = self.arg(v, dimmap, False)
        key = (a, row, id(out))
        if key not in self.loads:
            self.loads[key] = self.new_id(v.dtype)
            out.append(Load(self.loads[key], a))
        return self.loads[key]

    def op_stmt(self, m, row, out):
        srcs = tuple(self.src(m, o, row, out) for o in m.operands)
        out.append(Op(self.value_id(m.out), m.op, m.kind, srcs, m.out.dtype, tuple(m.params)))

    def build(self) -> tuple[LoopKernel, list]:
        k = self.k
        members = sorted(k.members, key=self.fuser.position.__getitem__)
        stored = set(self.fuser.stored(k))
        reduces = [m for m in members if isinstance(m, Reduce)]
        last = max((k.level[m.out] for m in reduces), default=0)

        def store_pass(v):
            return k.level[v] + 1 if k.level[v] + 1 <= last else last + 1

        f_stores = [m.out for m in members if m.out in stored and k.space[m.out] == F]
        n_passes = max([last] + [store_pass(v) for v in f_stores])
        passes = [Pass() for _ in range(n_passes)]
        before = self.before
        by_value = {m.out: m for m in members}

        for p in range(1, n_passes + 1):
            roots = [m.operand.value for m in reduces if k.level[m.out] == p]
            roots += [v for v in f_stores if store_pass(v) == p]
            need = set()
            stack = [v for v in roots if v in by_value]
            while stack:
                v = stack.pop()
                if v in need or k.space.get(v) != F:
                    continue
                need.add(v)
                stack.extend(w for w in by_value[v].inputs if w in by_value)
            body = passes[p - 1].body
            for m in members:
                if m.out in need:
                    self.op_stmt(m, False, body)
            for v in f_stores:
                if store_pass(v) == p:
                    body.append(Store(self.arg(v, k.emb[v], True), self.value_id(v)))
            for m in reduces:
                if k.level[m.out] == p:
                    src = self.src(m, m.operand, False, body)
                    kind = ir.kind_of(m.out.dtype)
                    passes[p - 1].accumulate.append(
                        Accumulate(self.value_id(m.out), m.op, src, kind, m.out.dtype))

        # O-space values: before the passes (level 0) or after pass `level`.
        for m in members:
            v = m.out
            if k.space[v] != O:
                continue
            out = before if k.level[v] == 0 else passes[k.level[v] - 1].after
            if isinstance(m, Pointwise):
                self.op_stmt(m, True, out)
            if v in stored:
                out.append(Store(self.arg(v, k.emb[v], True), self.value_id(v)))

        # Row-level loads go before everything: hoist those op_stmt put in `after`.
        for p in passes:
            loads = [s for s in p.after if isinstance(s, Load)]
            if loads:
                p.after = [s for s in p.after if not isinstance(s, Load)]
                before[:0] = loads

        loaded = {v for v, a in self.args if not a.output}
        aliased = any(a.output and v.alias in loaded for v, a in self.args)
        kernel = LoopKernel(
            name=self.name, dims=tuple(k.dims), n_outer=k.n_outer,
            args=[a for _, a in self.args], before=before, passes=passes,
            types=dict(self.types), ops=len(members),
            summary=" ".join(_describe(m) for m in members), aliased=aliased,
            scalars=[v.dtype for v in self.scalars])
        return kernel, [v for v, _ in self.args], list(self.scalars)


def _describe(m):
    if isinstance(m, Reduce):
        return f"reduce_{m.op}"
    return m.op


def build_kernel(fuser, k, name):
    """(LoopKernel, the Values bound to its tensor arguments and those bound
    to its scalar arguments, in order)."""
    return _Builder(fuser, k, name).build()
