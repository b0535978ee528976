"""The loops of a C kernel (emit_c.py spells its statements).

A pointwise kernel covers elements [begin, end) of its space in row-major
order: one flat loop when every tensor maps every dim and is contiguous in
the kernel's order, else runs along the innermost dim (a loop the compiler
vectorizes when every stride there is 1). A reduction kernel covers outer
indices [begin, end): per outer index, the O-space statements, then each
pass as nested loops over R (accumulators folded in row-major order),
then that pass's O-space statements."""

from __future__ import annotations

import math

from .ir import LoopKernel


class KernelWriter:
    def __init__(self, k: LoopKernel, dialect):
        self.k, self.d = k, dialect
        self.lines = []
        self.depth = 1

    def w(self, line=""):
        self.lines.append("  " * self.depth + line if line else "")

    def open(self, line):
        self.w(line)
        self.depth += 1

    def close(self, line="}"):
        self.depth -= 1
        self.w(line)

    # ---- shared pieces --------------------------------------------------------------

    def mapped(self, a):
        """(tensor dim, kernel dim) pairs of argument a."""
        return [(j, d) for j, d in enumerate(self.k.args[a].dimmap) if d is not None]

    def stride(self, a, d):
        for j, kd in self.mapped(a):
            if kd == d:
                return f"s{a}_{d}"
        return None

    def header(self):
        k, d = self.k, self.d
        self.lines.append(f"int {k.name}(const loom_kernel_args *args, int64_t begin, int64_t end) {{")
        self.w(f"/* {k.summary} */")
        self.w("const loom_tensor *t = args->tensors;")
        checks = [f"args->num_tensors < {len(k.args)}", f"args->num_scalars < {len(k.scalars)}"]
        for a, arg in enumerate(k.args):
            checks.append(f"t[{a}].dtype != {d.dtype_code(arg.dtype)} || t[{a}].rank != {len(arg.dimmap)}")
            for j, kd in enumerate(arg.dimmap):
                size = 1 if kd is None else k.dims[kd]
                checks.append(f"t[{a}].sizes[{j}] != {size}")
        self.w("if (" + " ||\n      ".join(checks) + ")")
        self.w("  return LOOM_CG_BAD;")
        for a, arg in enumerate(k.args):
            et = d.element_type(arg.dtype)
            const = "" if arg.output else "const "
            restrict = "" if k.aliased else "restrict "
            self.w(f"{const}{et} *{restrict}p{a} = ({const}{et} *)t[{a}].data;")
            for j, kd in self.mapped(a):
                self.w(f"const int64_t s{a}_{kd} = t[{a}].strides[{j}];")

    def offset_sum(self, a, dims_vars):
        """sum of var * stride over the mapped dims in dims_vars (dim -> var)."""
        terms = [f"{var} * {self.stride(a, dim)}" for dim, var in dims_vars if self.stride(a, dim)]
        return " + ".join(terms) if terms else "0"

    def statements(self, stmts, offset):
        for s in stmts:
            self.w(self.d.stmt(s, self.k, offset))

    # ---- pointwise ------------------------------------------------------------------

    def pointwise(self):
        k = self.k
        nd = len(k.dims)
        body = k.passes[0].body
        nargs = len(k.args)
        self.statements(k.before, lambda a: "0")  # scalar arguments only
        if nd == 0:
            self.open("for (int64_t i = begin; i < end; ++i) {")
            self.statements(body, lambda a: "0")
            self.close()
            return
        full = all(len(self.mapped(a)) == nd for a in range(nargs))
        if full:
            conds = []
            for a in range(nargs):
                for dd in range(nd):
                    conds.append(f"s{a}_{dd} == {math.prod(k.dims[dd + 1:])}")
            self.open(f"if ({' && '.join(conds)}) {{")
            self.open("for (int64_t i = begin; i < end; ++i) {")
            self.statements(body, lambda a: "i")
            self.close()
            self.w("return LOOM_OK;")
            self.close()
        last = nd - 1
        self.w("int64_t r = begin;")
        for dd in reversed(range(nd)):
            self.w(f"int64_t i{dd} = r % {k.dims[dd]}; r /= {k.dims[dd]};")
        self.w("(void)r;")
        unit = [f"s{a}_{last} == 1" for a in range(nargs) if self.stride(a, last)]
        self.open("for (int64_t i = begin; i < end;) {")
        self.w(f"int64_t n = {k.dims[last]} - i{last};")
        self.w("if (n > end - i) n = end - i;")
        for a in range(nargs):
            self.w(f"const int64_t b{a} = {self.offset_sum(a, [(dd, f'i{dd}') for dd in range(nd)])};")

        def run(step):
            self.open("for (int64_t j = 0; j < n; ++j) {")
            self.statements(body, lambda a: f"b{a} + j{step(a)}" if self.stride(a, last) else f"b{a}")
            self.close()

        if unit:
            self.open(f"if ({' && '.join(unit)}) {{")
            run(lambda a: "")
            self.close("} else {")
            self.depth += 1
            run(lambda a: f" * s{a}_{last}")
            self.close()
        else:
            run(lambda a: "")
        self.w("i += n;")
        self.w(f"i{last} = 0;")
        for dd in reversed(range(last)):
            self.w(f"if (++i{dd} < {k.dims[dd]}) continue;")
            self.w(f"i{dd} = 0;")
        self.close()

    # ---- reductions -----------------------------------------------------------------

    def reduction(self):
        k, d = self.k, self.d
        no, nd = k.n_outer, len(k.dims)
        nargs = len(k.args)
        self.open("for (int64_t o = begin; o < end; ++o) {")
        self.w("int64_t r = o;")
        for dd in reversed(range(no)):
            self.w(f"const int64_t i{dd} = r % {k.dims[dd]}; r /= {k.dims[dd]};")
        self.w("(void)r;")
        for a in range(nargs):
            self.w(f"const int64_t b{a} = {self.offset_sum(a, [(dd, f'i{dd}') for dd in range(no)])};")
        self.statements(k.before, lambda a: f"b{a}")
        for p in k.passes:
            for acc in p.accumulate:
                self.w(d.acc_init(acc))
            self.open("{")
            for dd in range(no, nd):
                self.open(f"for (int64_t i{dd} = 0; i{dd} < {k.dims[dd]}; ++i{dd}) {{")
            for a in range(nargs):
                inner = self.offset_sum(a, [(dd, f"i{dd}") for dd in range(no, nd)])
                self.w(f"const int64_t e{a} = b{a} + {inner};")
            self.statements(p.body, lambda a: f"e{a}")
            for acc in p.accumulate:
                self.w(d.acc_update(acc, k))
            for _ in range(no, nd):
                self.close()
            self.close()
            for acc in p.accumulate:
                self.w(d.acc_final(acc))
            self.statements(p.after, lambda a: f"b{a}")
        self.close()

    def source(self) -> str:
        self.header()
        if self.k.is_pointwise:
            self.pointwise()
        else:
            self.reduction()
        self.w("return LOOM_OK;")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n\n"
