"""The loops of a C kernel (emit_c.py spells its statements).

A pointwise kernel covers elements [begin, end) of its space in row-major
order: one flat run when every tensor maps every dim and is contiguous in
the kernel's order, else runs along the innermost dim. A reduction kernel
covers outer indices [begin, end): per outer index, the O-space
statements, then each pass over R (accumulators folded in an order fixed by
R's size), then that pass's O-space statements; a single-pass reduction
over rows of a row-major operand covers blocks of outputs at once, row by
row, each output's elements in index order (the library's column sums).

Element loops live in helpers whose tensor pointers are restrict
parameters (GCC honours restrict there, not on locals, and without it the
loops over the library's inline math do not vectorize), with a variant for
unit strides. A pass over a single reduced dim accumulates into LANES lanes
(element r into lane r mod LANES, as the library's contiguous sums do),
which vectorizes without reassociating, then folds them pairwise; a pass
over several reduced dims runs nested loops, the innermost in lanes.
"""

from __future__ import annotations

from .ir import LoopKernel, Store


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

    def size_source(self):
        """Kernel dim -> (argument, tensor dim) its size is read from."""
        if not hasattr(self, "_sources"):
            self._sources = {}
            for a, arg in enumerate(self.k.args):
                for j, kd in enumerate(arg.dimmap):
                    if kd is not None and kd not in self._sources:
                        self._sources[kd] = (a, j)
        return self._sources

    def size(self, d) -> str:
        """The C expression of kernel dim d's size."""
        return f"n{d}" if d in self.size_source() else str(self.k.dims[d])

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
        self.w("if (" + " ||\n      ".join(checks) + ")")
        self.w("  return LOOM_CG_BAD;")
        # The sizes are arguments (one kernel serves every size of a shape
        # kind): each dim's from the first tensor that follows it, and every
        # other tensor must agree.
        checks = []
        for kd, (a, j) in sorted(self.size_source().items()):
            self.w(f"const int64_t n{kd} = t[{a}].sizes[{j}];")
        for a, arg in enumerate(k.args):
            for j, kd in enumerate(arg.dimmap):
                if (kd is None) or self.size_source().get(kd) != (a, j):
                    checks.append(f"t[{a}].sizes[{j}] != {1 if kd is None else self.size(kd)}")
        checks += [f"n{kd} < 1" for kd in self.size_source()]
        if checks:
            self.w("if (" + " ||\n      ".join(checks) + ")")
            self.w("  return LOOM_CG_BAD;")
        for a, arg in enumerate(k.args):
            et = d.element_type(arg.dtype)
            const = "" if arg.output else "const "
            self.w(f"{const}{et} *p{a} = ({const}{et} *)t[{a}].data;")
            for j, kd in self.mapped(a):
                self.w(f"const int64_t s{a}_{kd} = t[{a}].strides[{j}];")

    def offset_sum(self, a, dims_vars):
        """sum of var * stride over the mapped dims in dims_vars (dim -> var)."""
        terms = [f"{var} * {self.stride(a, dim)}" for dim, var in dims_vars if self.stride(a, dim)]
        return " + ".join(terms) if terms else "0"

    def statements(self, stmts, offset, fast=False):
        for s in stmts:
            self.w(self.d.stmt(s, self.k, offset, fast) if fast else self.d.stmt(s, self.k, offset))

    # ---- pointwise ------------------------------------------------------------------

    def pointer_params(self):
        """The span helper's tensor parameters: restrict pointers (GCC
        trusts restrict on parameters, not on locals: without it the loops
        do not vectorize), unless an output is also an input."""
        k, d = self.k, self.d
        params = []
        for a, arg in enumerate(k.args):
            const = "" if arg.output else "const "
            restrict = "" if k.aliased else "restrict "
            params.append(f"{const}{d.element_type(arg.dtype)} *{restrict}p{a}")
        return params

    def span(self):
        """A helper running n consecutive elements along the innermost dim
        (one flat run of a contiguous space), from base pointers, with the
        steps of the arguments that follow that dim."""
        k = self.k
        last = len(k.dims) - 1
        stepped = [a for a in range(len(k.args)) if last >= 0 and self.stride(a, last)]
        params = ["const loom_kernel_args *args", "int64_t n"] + self.pointer_params()
        params += [f"int64_t s{a}" for a in stepped]
        self.lines.append(f"static __attribute__((noinline)) void {k.name}_span("
                          + ", ".join(params) + ") {")
        self.w("(void)args;")
        self.statements(k.before, lambda a: "0")  # scalar arguments only
        body = k.passes[0].body
        guarded = self.d.guarded(body) if hasattr(self.d, "guarded") else False

        def loop(step, stmts, fast=False):
            self.open("for (int64_t j = 0; j < n; ++j) {")
            self.statements(stmts, lambda a: f"j{step(a)}" if a in stepped else "0", fast)
            self.close()

        def run(step):
            if not guarded:
                loop(step, body)
                return
            # Ops whose arithmetic form holds in a range (sin up to
            # LOOM_TRIG_MAX, pow where loom_powf_ok): a loop of arithmetic
            # forms alone, which vectorizes, noting whether every element
            # was in range; else the run again with each element's exact
            # form (the C library's outside the range), as the library's
            # MAP1_WITHIN does. Every element's value is the same either
            # way. An in-place kernel (an output is an input's memory)
            # checks first and stores once: it cannot run twice.
            self.w("int ok = 1;")
            if k.aliased:
                loop(step, [s for s in body if not isinstance(s, Store)], fast=True)
                self.open("if (ok) {")
                loop(step, body, fast=True)  # the same checks: ok stays 1
                self.close("} else {")
                self.depth += 1
                loop(step, body)
                self.close()
            else:
                loop(step, body, fast=True)
                self.open("if (!ok) {")
                loop(step, body)
                self.close()

        if stepped:
            self.open(f"if ({' && '.join(f's{a} == 1' for a in stepped)}) {{")
            run(lambda a: "")
            self.close("} else {")
            self.depth += 1
            run(lambda a: f" * s{a}")
            self.close()
        else:
            run(lambda a: "")
        self.lines.append("}")
        self.lines.append("")

    def call_span(self, n, bases, steps):
        k = self.k
        last = len(k.dims) - 1
        args = ["args", n] + [f"p{a} + {bases(a)}" for a in range(len(k.args))]
        args += [steps(a) for a in range(len(k.args)) if last >= 0 and self.stride(a, last)]
        self.w(f"{k.name}_span({', '.join(args)});")

    def pointwise(self):
        k = self.k
        nd = len(k.dims)
        nargs = len(k.args)
        if nd == 0:
            self.call_span("end - begin", lambda a: "0", lambda a: "0")
            return
        last = nd - 1
        if all(len(self.mapped(a)) == nd for a in range(nargs)):
            conds = [f"s{a}_{dd} == {' * '.join(self.size(x) for x in range(dd + 1, nd)) or 1}"
                     for a in range(nargs) for dd in range(nd)]
            self.open(f"if ({' && '.join(conds)}) {{")
            self.call_span("end - begin", lambda a: "begin", lambda a: "1")
            self.w("return LOOM_OK;")
            self.close()
        self.w("int64_t r = begin;")
        for dd in reversed(range(nd)):
            self.w(f"int64_t i{dd} = r % {self.size(dd)}; r /= {self.size(dd)};")
        self.w("(void)r;")
        self.open("for (int64_t i = begin; i < end;) {")
        self.w(f"int64_t n = {self.size(last)} - i{last};")
        self.w("if (n > end - i) n = end - i;")
        self.call_span("n", lambda a: f"({self.offset_sum(a, [(dd, f'i{dd}') for dd in range(nd)])})",
                       lambda a: f"s{a}_{last}")
        self.w("i += n;")
        self.w(f"i{last} = 0;")
        for dd in reversed(range(last)):
            self.w(f"if (++i{dd} < {self.size(dd)}) continue;")
            self.w(f"i{dd} = 0;")
        self.close()

    # ---- reductions -----------------------------------------------------------------

    #: Accumulator lanes of a pass over one reduced dim: element r goes to
    #: lane r mod LANES (the library's contiguous sums use 64 such lanes),
    #: so the loop over a block of lanes vectorizes without reassociating.
    LANES = 64

    def single_r(self):
        return len(self.k.dims) - self.k.n_outer == 1

    def pass_inputs(self, p):
        """Ids a pass body reads but does not define (O-space values)."""
        defined, used = set(), []
        for s_ in p.body:
            for src in getattr(s_, "srcs", ()):
                if isinstance(src, int) and src not in defined and src not in used:
                    used.append(src)
            src = getattr(s_, "src", None)
            if isinstance(src, int) and src not in defined and src not in used and not hasattr(s_, "op"):
                used.append(src)
            if hasattr(s_, "dst"):
                defined.add(s_.dst)
        for acc in p.accumulate:
            if acc.src not in defined and acc.src not in used:
                used.append(acc.src)
        return used

    def pass_helper(self, index, p):
        """A pass over one reduced dim as a helper with restrict pointers:
        lanes of LANES elements (the loop over a block vectorizes), the
        tail, then the lanes folded into the accumulators' results."""
        k, d = self.k, self.d
        r = k.n_outer
        L = self.LANES
        stepped = [a for a in range(len(k.args)) if self.stride(a, r)]
        reads = self.pass_inputs(p)
        params = ["const loom_kernel_args *args", "int64_t nr"] + self.pointer_params()
        params += [f"int64_t s{a}" for a in stepped]
        params += [f"const {d.value_type(k.types[i])} v{i}" for i in reads]
        params += [f"{d.acc_type(acc)} *restrict out{acc.dst}" for acc in p.accumulate]
        self.lines.append(f"static __attribute__((noinline)) void {k.name}_pass{index}("
                          + ", ".join(params) + ") {")
        self.w("(void)args;")
        for acc in p.accumulate:
            self.w(d.acc_init(acc, L))

        def element(offset, lane):
            self.statements(p.body, offset)
            for acc in p.accumulate:
                self.w(d.acc_update(acc, k, lane))

        def blocks(step):
            self.w("int64_t i = 0;")
            self.open(f"for (; i + {L} <= nr; i += {L}) {{")
            self.open(f"for (int64_t l = 0; l < {L}; ++l) {{")
            element(lambda a: f"(i + l){step(a)}" if a in stepped else "0", "l")
            self.close()
            self.close()
            self.open(f"for (int64_t l = 0; i < nr; ++i, ++l) {{")
            element(lambda a: f"i{step(a)}" if a in stepped else "0", "l")
            self.close()

        if stepped:
            self.open(f"if ({' && '.join(f's{a} == 1' for a in stepped)}) {{")
            blocks(lambda a: "")
            self.close("} else {")
            self.depth += 1
            blocks(lambda a: f" * s{a}")
            self.close()
        else:
            blocks(lambda a: "")
        for acc in p.accumulate:
            self.w(d.lanes_fold(acc, L, f"out{acc.dst}"))
        self.lines.append("}")
        self.lines.append("")

    #: Outputs a column pass covers at once (block_helper).
    BLOCK = 256
    #: Rows ahead of the one summed that a column pass prefetches: each row
    #: of a column block starts a new page, where hardware prefetch stops.
    AHEAD = 4

    def blockable(self):
        """Whether the kernel has a column form: one pass over one reduced
        dim that reads nothing computed per output before it."""
        k = self.k
        return (self.single_r() and k.n_outer >= 1 and len(k.passes) == 1 and not k.before
                and not self.pass_inputs(k.passes[0]))

    def block_helper(self, p):
        """The pass over up to BLOCK consecutive outputs along the last
        outer dim at once, row by row: for each reduced index in order,
        the outputs in turn, so a reduction over rows (a bias gradient's
        sum over the batch) reads each row along memory instead of a
        column per output. Each output takes its elements in index order
        into one accumulator, as the library's column sums do
        (kernels/reduce, rd_columns): eager's bits for such a layout. The
        loop over a block of unit-stride outputs vectorizes across the
        outputs."""
        k, d = self.k, self.d
        r, last = k.n_outer, k.n_outer - 1
        W, ahead = self.BLOCK, self.AHEAD
        stepped = [a for a in range(len(k.args)) if self.stride(a, r)]
        across = [a for a in range(len(k.args)) if self.stride(a, last)]
        params = ["const loom_kernel_args *args", "int64_t nr", "int64_t wn"] + self.pointer_params()
        params += [f"int64_t s{a}" for a in stepped] + [f"int64_t t{a}" for a in across]
        params += [f"{d.acc_type(acc)} *restrict out{acc.dst}" for acc in p.accumulate]
        self.lines.append(f"static __attribute__((noinline)) void {k.name}_block0("
                          + ", ".join(params) + ") {")
        self.w("(void)args;")
        for acc in p.accumulate:
            self.w(f"{d.acc_type(acc)} a{acc.dst}[{W}];")
            self.w(f"for (int64_t q = 0; q < wn; ++q) a{acc.dst}[q] = {d._acc_initial(acc)};")

        def rows(unit):
            self.open("for (int64_t i = 0; i < nr; ++i) {")
            if unit:
                self.open(f"if (i + {ahead} < nr) {{")
                for a in stepped:
                    self.w(f"for (int64_t x = 0; x < wn; x += (int64_t)(64 / sizeof(*p{a}))) "
                           f"__builtin_prefetch(p{a} + (i + {ahead}) * s{a} + x);")
                self.close()
            self.open("for (int64_t q = 0; q < wn; ++q) {")

            def offset(a):
                terms = ([f"i * s{a}"] if a in stepped else []) + \
                        ([("q" if unit else f"q * t{a}")] if a in across else [])
                return "(" + " + ".join(terms) + ")" if terms else "0"
            self.statements(p.body, offset)
            for acc in p.accumulate:
                self.w(d.acc_update(acc, k, "q"))
            self.close()
            self.close()

        if across:
            self.open(f"if ({' && '.join(f't{a} == 1' for a in across)}) {{")
            rows(True)
            self.close("} else {")
            self.depth += 1
            rows(False)
            self.close()
        else:
            rows(False)
        for acc in p.accumulate:
            self.w(f"for (int64_t q = 0; q < wn; ++q) out{acc.dst}[q] = a{acc.dst}[q];")
        self.lines.append("}")
        self.lines.append("")

    def column_reduction(self):
        """The kernel's outputs in blocks of BLOCK along the last outer dim
        (block_helper), when a reduced operand is not contiguous along the
        reduced dim."""
        k, d = self.k, self.d
        no, nargs = k.n_outer, len(self.k.args)
        last, W = no - 1, self.BLOCK
        p = k.passes[0]
        stepped = [a for a in range(nargs) if self.stride(a, no)]
        if not stepped:
            return
        self.open(f"if ({' || '.join(f's{a}_{no} != 1' for a in stepped)}) {{")
        self.open("for (int64_t o = begin; o < end;) {")
        self.w("int64_t r = o;")
        for dd in reversed(range(no)):
            self.w(f"const int64_t i{dd} = r % {self.size(dd)}; r /= {self.size(dd)};")
        self.w("(void)r;")
        self.w(f"int64_t wn = {self.size(last)} - i{last};")
        self.w("if (wn > end - o) wn = end - o;")
        self.w(f"if (wn > {W}) wn = {W};")
        for a in range(nargs):
            self.w(f"const int64_t b{a} = {self.offset_sum(a, [(dd, f'i{dd}') for dd in range(no)])};")
        for acc in p.accumulate:
            self.w(f"{d.acc_type(acc)} R{acc.dst}[{W}];")
        call = ["args", self.size(no), "wn"] + [f"p{a} + b{a}" for a in range(nargs)]
        call += [f"s{a}_{no}" for a in stepped]
        call += [f"s{a}_{last}" for a in range(nargs) if self.stride(a, last)]
        call += [f"R{acc.dst}" for acc in p.accumulate]
        self.w(f"{k.name}_block0({', '.join(call)});")
        self.open("for (int64_t q = 0; q < wn; ++q) {")
        for a in range(nargs):
            step = f" + q * s{a}_{last}" if self.stride(a, last) else ""
            self.w(f"const int64_t c{a} = b{a}{step};")
            self.w(f"(void)c{a};")
        for acc in p.accumulate:
            self.w(f"const {d.acc_type(acc)} a{acc.dst} = R{acc.dst}[q];")
            self.w(d.acc_final(acc))
        self.statements(p.after, lambda a: f"c{a}")
        self.close()
        self.w("o += wn;")
        self.close()
        self.w("return LOOM_OK;")
        self.close()

    def reduction(self):
        k, d = self.k, self.d
        no, nd = k.n_outer, len(k.dims)
        nargs = len(k.args)
        if self.blockable():
            self.column_reduction()
        self.open("for (int64_t o = begin; o < end; ++o) {")
        self.w("int64_t r = o;")
        for dd in reversed(range(no)):
            self.w(f"const int64_t i{dd} = r % {self.size(dd)}; r /= {self.size(dd)};")
        self.w("(void)r;")
        for a in range(nargs):
            self.w(f"const int64_t b{a} = {self.offset_sum(a, [(dd, f'i{dd}') for dd in range(no)])};")
        self.statements(k.before, lambda a: f"b{a}")
        for index, p in enumerate(k.passes):
            if self.single_r():
                for acc in p.accumulate:
                    self.w(f"{d.acc_type(acc)} a{acc.dst};")
                call = ["args", self.size(no)] + [f"p{a} + b{a}" for a in range(nargs)]
                call += [f"s{a}_{no}" for a in range(nargs) if self.stride(a, no)]
                call += [f"v{i}" for i in self.pass_inputs(p)]
                call += [f"&a{acc.dst}" for acc in p.accumulate]
                self.w(f"{k.name}_pass{index}({', '.join(call)});")
            else:
                # Nested loops over the reduced dims, the innermost in lanes
                # (its element j into lane j mod LANES, folded pairwise at
                # the end): independent sums instead of one chain of adds.
                L, last = self.LANES, nd - 1
                for acc in p.accumulate:
                    self.w(f"{d.acc_type(acc)} r{acc.dst};")
                self.open("{")
                for acc in p.accumulate:
                    self.w(d.acc_init(acc, L))
                for dd in range(no, last):
                    self.open(f"for (int64_t i{dd} = 0; i{dd} < {self.size(dd)}; ++i{dd}) {{")

                def element(index, lane):
                    self.w(f"const int64_t i{last} = {index};")
                    for a in range(nargs):
                        inner = self.offset_sum(a, [(dd, f"i{dd}") for dd in range(no, nd)])
                        self.w(f"const int64_t e{a} = b{a} + {inner};")
                    self.statements(p.body, lambda a: f"e{a}")
                    for acc in p.accumulate:
                        self.w(d.acc_update(acc, k, lane))

                self.w("int64_t j = 0;")
                self.open(f"for (; j + {L} <= {self.size(last)}; j += {L}) {{")
                self.open(f"for (int64_t l = 0; l < {L}; ++l) {{")
                element("j + l", "l")
                self.close()
                self.close()
                self.open(f"for (int64_t l = 0; j < {self.size(last)}; ++j, ++l) {{")
                element("j", "l")
                self.close()
                for _ in range(no, last):
                    self.close()
                for acc in p.accumulate:
                    self.w(d.lanes_fold(acc, L, f"(&r{acc.dst})"))
                self.close()
                for acc in p.accumulate:
                    self.w(f"const {d.acc_type(acc)} a{acc.dst} = r{acc.dst};")
            for acc in p.accumulate:
                self.w(d.acc_final(acc))
            self.statements(p.after, lambda a: f"b{a}")
        self.close()

    def source(self) -> str:
        if self.k.is_pointwise:
            self.span()
        elif self.single_r():
            for index, p in enumerate(self.k.passes):
                self.pass_helper(index, p)
            if self.blockable():
                self.block_helper(self.k.passes[0])
        self.header()
        if self.k.is_pointwise:
            self.pointwise()
        else:
            self.reduction()
        self.w("return LOOM_OK;")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n\n"
