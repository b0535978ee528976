"""The front end: a ``@tl.jit`` function's Python AST, read (never run)
for one specialisation, into C statements of one program (nodes.py holds
the values and their C). Constexprs and Python literals fold while
tracing: an ``if`` on one traces one branch, ``tl.static_range`` unrolls.
Errors name the user's file and line."""

from __future__ import annotations

import ast
import builtins
import linecache

from . import core, rowloop, rowmap
from . import nodes as N
from .nodes import Arr, Bin, Cast, Node, Sca, Un, View


class TileCompileError(Exception):
    """A kernel cannot be compiled: the message names the source line."""


class Ptr:
    """A pointer (block): tensor argument `arg` plus an element offset,
    split into a scalar part (a C scalar, loop-carried cheaply) and a
    block part (lazy)."""

    def __init__(self, arg, soff, boff):
        self.arg, self.soff, self.boff = arg, soff, boff

    @property
    def shape(self):
        return self.boff.shape if self.boff is not None else ()


class TensorArg:
    def __init__(self, index, name, dtype, aligned):
        self.index, self.name, self.dtype, self.aligned = index, name, dtype, aligned
        self.c = f"p{index}"


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Frame:
    def __init__(self, fn, env):
        self.fn = fn  # a JITFunction
        self.env = env


class Tracer:
    def __init__(self, jitfn, specs, builtins_table, lazy=False, eager=(), written=()):
        """specs: per parameter, ("tensor", dtype, aligned) | ("int", dtype) |
        ("float",) | ("const", value). lazy: loads may stay lazy (no two
        tensor arguments share memory), but not loads number `eager` nor
        loads from the arguments `written` (nodes._Memory)."""
        self.b = N.Builder()
        N._open_scopes[:] = [0]
        N._mem.reset(lazy, eager, written)
        self.builtins = builtins_table
        self.tensor_decls, self.scalar_decls = [], []
        # what rowmap.prove reads: every tl.load / tl.store (rowmap.Access),
        # whether a run-time if or for was traced, whether program_id(1/2) was
        self.accesses, self.control, self.other_pid = [], False, False
        env = {}
        n_tensors = n_scalars = 0
        for name, spec in zip(jitfn.params, specs):
            if spec[0] == "tensor":
                arg = TensorArg(n_tensors, name, spec[1], spec[2])
                n_tensors += 1
                et = _elem_ctype(arg.dtype)
                decl = f"{et} *{arg.c} = ({et} *)A->tensors[{arg.index}].data;"
                if arg.aligned:
                    decl = f"{et} *{arg.c} = ({et} *)__builtin_assume_aligned(A->tensors[{arg.index}].data, 16);"
                self.tensor_decls.append(decl)
                env[name] = Ptr(arg, None, None)
            elif spec[0] in ("int", "float"):
                d = spec[1]
                k = 3 + n_scalars
                n_scalars += 1
                v = f"a_{name}"
                field = "f" if spec[0] == "float" else "i"
                self.scalar_decls.append(f"const {d.ctype} {v} = ({d.ctype})A->scalars[{k}].{field};")
                env[name] = Sca(v, d)
                if spec[0] == "int":
                    env[name].sym = {("$" + name,): 1}
            else:
                env[name] = spec[1]
        self.frames = [Frame(jitfn, env)]
        self.node = None

    # ---- errors ---------------------------------------------------------------------------
    def error(self, message, node=None):
        node = node or self.node
        fn = self.frames[-1].fn
        line = fn.first_line + (node.lineno - 1 if node is not None else 0)
        text = linecache.getline(fn.filename, line).strip()
        raise TileCompileError(f"{fn.filename}:{line}: in {fn.__name__}: {message}\n    {text}")

    @property
    def env(self):
        return self.frames[-1].env

    # ---- entry ----------------------------------------------------------------------------
    def run(self):
        fn = self.frames[-1].fn
        try:
            self.block(fn.tree.body)
        except _Return:
            pass
        rowloop.drop_unread(self.b.lines)
        return [str(line) for line in self.b.lines]

    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    # ---- statements -----------------------------------------------------------------------
    def stmt(self, s):
        self.node = s
        try:
            method = getattr(self, "s_" + type(s).__name__, None)
            if method is None:
                self.error(f"unsupported statement: {type(s).__name__}")
            method(s)
        except (TileCompileError, _Return):
            raise
        except (TypeError, ValueError, NotImplementedError, KeyError, IndexError) as e:
            self.error(str(e), s)

    def s_Expr(self, s):
        if isinstance(s.value, ast.Constant):
            return  # docstring
        self.expr(s.value)

    def s_Pass(self, s):
        pass

    def s_Assign(self, s):
        value = self.expr(s.value)
        for t in s.targets:
            self.bind(t, value)

    def s_AnnAssign(self, s):
        if s.value is not None:
            self.bind(s.target, self.expr(s.value))

    def bind(self, target, value):
        if isinstance(target, ast.Name):
            if isinstance(value, Node) and value.shape and N.costly(value):
                value = self.b.materialise(value)  # computed once, however often it is read
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                self.error("cannot unpack this value into "
                           f"{len(target.elts)} names", target)
            for t, v in zip(target.elts, value):
                self.bind(t, v)
        else:
            self.error("only names and tuples of names can be assigned", target)

    def s_AugAssign(self, s):
        if not isinstance(s.target, ast.Name):
            self.error("only names can be assigned")
        cur = self.load_name(s.target.id, s.target)
        self.env[s.target.id] = self.binop(_BINOPS[type(s.op)], cur, self.expr(s.value))

    def s_Assert(self, s):
        c = self.expr(s.test)
        if not isinstance(c, Node) and not c:
            self.error("assertion failed at compile time")

    def s_Return(self, s):
        value = self.expr(s.value) if s.value is not None else None
        if len(self.frames) == 1:
            if value is not None:
                self.error("a kernel returns nothing")
            if self.in_runtime_block:
                self.b.line("return;")
                return
        raise _Return(value)

    in_runtime_block = 0

    def s_If(self, s):
        cond = self.expr(s.test)
        if not isinstance(cond, Node):
            self.block(s.body if _truth(cond) else s.orelse)
            return
        if cond.shape:
            self.error("an if needs a scalar condition (use tl.where for blocks)")
        self.control = True
        if len(self.frames) > 1 and _has_return(s):
            self.error("return inside a runtime if of a called @jit function is not supported")
        c = N.emit(self.b.materialise(cond), [])
        before = dict(self.env)
        outer = self.b.lines
        results = []
        for branch in (s.body, s.orelse):
            self.b.lines = []
            self.frames[-1].env = dict(before)
            self.in_runtime_block += 1
            self.b.depth += 1
            self.b.open_scope()
            try:
                self.block(branch)
            finally:
                self.b.close_scope()
                self.b.depth -= 1
                self.in_runtime_block -= 1
            results.append((self.b.lines, self.frames[-1].env))
        self.b.lines = outer
        merged = dict(before)
        copies = ([], [])
        changed = [k for k in before if any(env.get(k) is not before[k] for _, env in results)]
        for name in changed:
            vals = [env[name] for _, env in results]
            store = self._carrier(name, before[name], vals)
            merged[name] = store
            for k, v in enumerate(vals):
                lines_before = self.b.lines
                self.b.lines = copies[k]
                self.b.depth += 1
                self._assign_carrier(store, v, name)
                self.b.depth -= 1
                self.b.lines = lines_before
        self.b.line(f"if ({c}) {{")
        self.b.lines += results[0][0] + copies[0]
        self.b.line("} else {")
        self.b.lines += results[1][0] + copies[1]
        self.b.line("}")
        self.frames[-1].env = merged

    def _carrier(self, name, first, values):
        """Mutable storage for a variable whose value changes at run time
        (in a loop or a branch), declared here with `first`'s value."""
        if isinstance(first, Ptr):
            same_block = all(isinstance(v, Ptr) and v.boff is first.boff and v.arg is first.arg
                             for v in values)
            if not all(isinstance(v, Ptr) and v.arg is first.arg for v in values):
                self.error(f"{name} must stay a pointer into the same argument")
            soff = self.b.materialise(self._as_node(first.soff if first.soff is not None else 0,
                                                     core.int64, cast=True), mutable=True)
            boff = first.boff
            if same_block and boff is not None and boff.shape and N.irregular(boff):
                self.b.offsets(boff)  # once, before the loop
            if not same_block:
                if first.boff is None:
                    shape = values[0].shape
                    boff = self.b.materialise(Cast(self._splat(Sca("0", core.int64), shape), core.int64), mutable=True)
                else:
                    boff = self.b.materialise(Cast(first.boff, core.int64), mutable=True)
            return Ptr(first.arg, soff, boff)
        if not isinstance(first, Node):
            if all(v is first for v in values):
                return first
            first = self._as_node(first)
        d = first.dtype
        for v in values:
            if isinstance(v, Node) and v.dtype.kind == "f" and d.kind != "f":
                d = v.dtype
        if d is not first.dtype:
            first = Cast(first, d)
        return self.b.materialise(first, mutable=True)

    def _assign_carrier(self, store, value, name):
        if isinstance(store, Ptr):
            if not isinstance(value, Ptr):
                self.error(f"{name} must stay a pointer")
            soff = value.soff if value.soff is not None else 0
            self.b.assign(store.soff, self._as_node(soff, core.int64))
            if isinstance(store.boff, Arr) and value.boff is not store.boff:
                if value.boff is None:
                    self.b.assign(store.boff, Sca("0", core.int64))
                else:
                    if value.boff.shape != store.boff.shape:
                        self.error(f"{name} changes shape from {list(store.boff.shape)} to {list(value.boff.shape)}")
                    self.b.assign(store.boff, value.boff)
            return
        if not isinstance(store, Node):
            return
        value = self._as_node(value)
        if value is store:
            return
        if value.shape != store.shape and N.broadcast_shapes(value.shape, store.shape) != store.shape:
            self.error(f"{name} changes shape from {list(store.shape)} to {list(value.shape)} "
                       "inside a loop or branch")
        self.b.assign(store, value)

    def s_For(self, s):
        it = s.iter
        if not isinstance(it, ast.Call):
            self.error("for loops run over range(...), tl.range(...) or tl.static_range(...)")
        fn = self.expr(it.func)
        args = [self.expr(a) for a in it.args]
        if not isinstance(s.target, ast.Name):
            self.error("the loop variable must be a name")
        var = s.target.id
        if s.orelse:
            self.error("for ... else is not supported")
        if fn is self.builtins.get("static_range"):
            if any(isinstance(a, Node) for a in args):
                self.error("tl.static_range needs constexpr bounds")
            for i in range(*[int(a) for a in args]):
                self.env[var] = i
                self.block(s.body)
            return
        if fn is not builtins.range and fn is not self.builtins.get("range"):
            self.error("for loops run over range(...), tl.range(...) or tl.static_range(...)")
        self.control = True
        if len(args) == 1:
            args = [0] + args
        start, end = args[0], args[1]
        step = args[2] if len(args) > 2 else 1
        if isinstance(step, Node):
            if step.shape:
                self.error("the step of a loop must be a scalar")
            step_c = N.emit(self.b.materialise(step), [])
        else:
            step_c = str(int(step))
        ivar_dtype = core.int64 if any(isinstance(a, Node) and a.dtype is core.int64 for a in (start, end)) else core.int32
        lo = N.emit(self.b.materialise(self._as_node(start, ivar_dtype, cast=True)), [])
        hi = N.emit(self.b.materialise(self._as_node(end, ivar_dtype, cast=True)), [])
        # in source order (a set of names would order the carried values,
        # and so the C, by the process's string hashes)
        assigned = dict.fromkeys(n.id for st in s.body for n in ast.walk(st)
                                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        carried_names = [n for n in assigned if n in self.env and n != var]
        before = dict(self.env)
        # First pass (code discarded): which carried values change, and how.
        saved = (self.b.lines, self.b.depth)
        self.b.lines = []
        self.env[var] = Sca("0", ivar_dtype)
        for n in carried_names:
            if not isinstance(before[n], (Node, Ptr)):
                self.env[n] = self._as_node(before[n])
        self.in_runtime_block += 1
        self.b.open_scope()
        N._mem.loop_depth += 1
        try:
            self.block(s.body)
        finally:
            N._mem.loop_depth -= 1
            self.b.close_scope()
            self.in_runtime_block -= 1
        probe = dict(self.env)
        self.b.lines, self.b.depth = saved
        self.frames[-1].env = dict(before)
        stores = {}
        for n in carried_names:
            if probe.get(n) is before[n]:
                continue
            stores[n] = self._carrier(n, before[n], [probe[n]])
            self.env[n] = stores[n]
        i = self.b.name("k")
        cmp = ">" if not isinstance(step, Node) and step < 0 else "<"
        self.b.line(f"for ({ivar_dtype.ctype} {i} = {lo}; {i} {cmp} {hi}; {i} += {step_c}) {{")
        self.b.depth += 1
        self.env[var] = Sca(i, ivar_dtype)
        self.in_runtime_block += 1
        self.b.open_scope()
        N._mem.loop_depth += 1
        try:
            self.block(s.body)
        finally:
            self.in_runtime_block -= 1
        # New values first into temporaries where one reads another's storage.
        new = {n: self.env[n] for n in stores}
        for n, store in stores.items():
            v = new[n]
            if isinstance(v, Node) and not isinstance(v, Arr):
                names, _ = N.refs(v)
                others = set()
                for m, s_ in stores.items():
                    if m != n:
                        parts = (s_.soff, s_.boff) if isinstance(s_, Ptr) else (s_,)
                        others |= {x.name for x in parts if isinstance(x, Arr)}
                if names & others:
                    new[n] = self.b.materialise(v)
        for n, store in stores.items():
            self._assign_carrier(store, new[n], n)
        N._mem.loop_depth -= 1
        self.b.close_scope()
        self.b.depth -= 1
        self.b.line("}")
        after = dict(before)
        after.update(stores)
        self.frames[-1].env = after

    def s_While(self, s):
        self.error("while loops are not supported (use for ... in range)")

    # ---- expressions ----------------------------------------------------------------------
    def expr(self, e):
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            self.error(f"unsupported expression: {type(e).__name__}", e)
        return method(e)

    def e_Constant(self, e):
        return e.value

    def e_Tuple(self, e):
        return tuple(self.expr(x) for x in e.elts)

    e_List = e_Tuple

    def load_name(self, name, e):
        for env in (self.env,):
            if name in env:
                return env[name]
        fn = self.frames[-1].fn.fn
        if fn.__closure__ and name in fn.__code__.co_freevars:
            try:
                v = fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents
            except ValueError:
                self.error(f"name {name!r} is not bound yet", e)
            return v.value if isinstance(v, core.constexpr) else v
        g = self.frames[-1].fn.globals
        if name in g:
            v = g[name]
            return v.value if isinstance(v, core.constexpr) else v
        if hasattr(builtins, name):
            return getattr(builtins, name)
        self.error(f"name {name!r} is not defined", e)

    def e_Name(self, e):
        return self.load_name(e.id, e)

    def e_Attribute(self, e):
        obj = self.expr(e.value)
        if isinstance(obj, (Node, Ptr)):
            if e.attr == "dtype":
                return obj.dtype if isinstance(obj, Node) else ("ptr", obj.arg.dtype)
            if e.attr == "shape":
                return obj.shape
            if e.attr == "T":
                return self.builtins["trans"](self, obj)
            if e.attr in ("to", "__getitem__"):
                return _Method(obj, e.attr)
            if e.attr in ("sum", "max", "min", "argmax"):
                return _Method(obj, e.attr)
            self.error(f"blocks have no attribute {e.attr!r}", e)
        if isinstance(obj, tuple) and e.attr == "value":
            return obj
        try:
            v = getattr(obj, e.attr)
        except AttributeError:
            self.error(f"{obj!r} has no attribute {e.attr!r}", e)
        return v.value if isinstance(v, core.constexpr) else v

    def e_Call(self, e):
        fn = self.expr(e.func)
        args = [self.expr(a) for a in e.args]
        kwargs = {k.arg: self.expr(k.value) for k in e.keywords}
        if isinstance(fn, _Method):
            if fn.name == "to":
                return self.builtins["to"](self, fn.obj, *args, **kwargs)
            return self.builtins[fn.name](self, fn.obj, *args, **kwargs)
        impl = self.builtins.get(id(fn))
        if impl is not None:
            return impl(self, *args, **kwargs)
        if getattr(fn, "_is_tile_jit", False):
            return self.inline(fn, args, kwargs)
        if fn is builtins.min or fn is builtins.max:
            if len(args) == 2 and any(isinstance(a, Node) for a in args):
                return self.binop("minimum" if fn is builtins.min else "maximum", *args)
        if fn is builtins.print:
            return None
        if any(isinstance(a, (Node, Ptr)) for a in list(args) + list(kwargs.values())):
            self.error(f"{getattr(fn, '__name__', fn)!s} cannot be called on run-time values in a kernel", e)
        if callable(fn):
            return fn(*args, **kwargs)
        self.error(f"{fn!r} is not callable", e)

    def inline(self, fn, args, kwargs):
        bound = fn.bind(args, kwargs)
        env = {}
        for name, v in zip(fn.params, bound):
            env[name] = v.value if isinstance(v, core.constexpr) else v
        self.frames.append(Frame(fn, env))
        saved_node = self.node
        depth = self.in_runtime_block
        self.in_runtime_block = 0
        try:
            self.block(fn.tree.body)
            result = None
        except _Return as r:
            result = r.value
        finally:
            self.frames.pop()
            self.node = saved_node
            self.in_runtime_block = depth
        return result

    def e_BinOp(self, e):
        op = _BINOPS.get(type(e.op))
        if op is None:
            self.error(f"unsupported operator {type(e.op).__name__}", e)
        return self.binop(op, self.expr(e.left), self.expr(e.right))

    def e_UnaryOp(self, e):
        v = self.expr(e.operand)
        if not isinstance(v, Node):
            return {ast.USub: lambda x: -x, ast.UAdd: lambda x: x, ast.Not: lambda x: not x,
                    ast.Invert: lambda x: ~x}[type(e.op)](v)
        if isinstance(e.op, ast.USub):
            return self.unary("neg", v)
        if isinstance(e.op, ast.UAdd):
            return v
        if isinstance(e.op, ast.Not):
            return self.unary("not", v, core.int1)
        return self.unary("invert", v)

    def e_Compare(self, e):
        if len(e.ops) != 1:
            left = self.expr(e.left)
            out = None
            for op, right_e in zip(e.ops, e.comparators):
                right = self.expr(right_e)
                c = self.binop(_CMPOPS[type(op)], left, right)
                out = c if out is None else self.binop("and", out, c)
                left = right
            return out
        op = type(e.ops[0])
        left, right = self.expr(e.left), self.expr(e.comparators[0])
        if op in (ast.Is, ast.IsNot, ast.In, ast.NotIn):
            if isinstance(left, Node) or isinstance(right, Node):
                self.error("is / in compare only constexprs", e)
            return {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
                    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}[op](left, right)
        return self.binop(_CMPOPS[op], left, right)

    def e_BoolOp(self, e):
        is_and = isinstance(e.op, ast.And)
        result = self.expr(e.values[0])
        for v in e.values[1:]:
            if not isinstance(result, Node):
                if is_and and not result or not is_and and result:
                    return result
                result = self.expr(v)
                continue
            other = self.expr(v)
            result = self.binop("logical_and" if is_and else "logical_or",
                                self.to_bool(result), self.to_bool(other))
        return result

    def to_bool(self, v):
        if isinstance(v, Node) and v.dtype.kind != "b":
            return self.binop("ne", v, 0)
        return v

    def e_IfExp(self, e):
        c = self.expr(e.test)
        if not isinstance(c, Node):
            return self.expr(e.body if c else e.orelse)
        return self.builtins["where"](self, c, self.expr(e.body), self.expr(e.orelse))

    def e_Subscript(self, e):
        obj = self.expr(e.value)
        sl = e.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if not isinstance(obj, (Node, Ptr)):
            return obj[self.expr(sl)]
        shape = list(obj.shape)
        out_shape, src, k = [], [], 0
        for it in items:
            if isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
                if k >= len(shape):
                    self.error("too many indices for a block", e)
                src.append(len(out_shape))
                out_shape.append(shape[k])
                k += 1
            elif isinstance(it, ast.Constant) and it.value is None:
                out_shape.append(1)
            else:
                self.error("blocks are indexed only with : and None", e)
        while k < len(shape):
            src.append(len(out_shape))
            out_shape.append(shape[k])
            k += 1
        if isinstance(obj, Ptr):
            return Ptr(obj.arg, obj.soff, View(obj.boff, out_shape, src) if obj.boff is not None else None)
        return View(obj, out_shape, src)

    # ---- arithmetic -----------------------------------------------------------------------
    def _as_node(self, v, d=None, cast=False):
        if isinstance(v, Node):
            return Cast(v, d) if (cast and d is not None and v.dtype is not d) else v
        if isinstance(v, Ptr):
            self.error("a pointer is not a number here")
        if isinstance(v, core.dtype) or v is None or isinstance(v, str):
            self.error(f"{v!r} is not a number")
        d = d or core.scalar_dtype(v)
        out = Sca(N.literal(v, d), d)
        if type(v) is int and d.kind == "i":
            out.sym = {(): v} if v else {}
        return out

    def _splat(self, node, shape):
        if node.shape == tuple(shape):
            return node
        return View(node, shape, ()) if not node.shape else View(node, shape, range(len(shape) - len(node.shape), len(shape)))

    def node_out(self, node):
        """A scalar result is computed now (a C variable); a block stays lazy."""
        if not node.shape:
            out = self.b.materialise(node)
            if out is not node and "sym" not in out.__dict__:
                sym = rowmap.scalar_sym(node)  # the integer it holds, for rowmap.prove
                if sym is not None:
                    out.sym = sym
            return out
        return node

    def binop(self, op, a, b):
        if not isinstance(a, (Node, Ptr)) and not isinstance(b, (Node, Ptr)):
            return _PY_OPS[op](a, b)
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            return self.ptr_arith(op, a, b)
        a_weak, b_weak = not isinstance(a, Node), not isinstance(b, Node)
        da = a.dtype if not a_weak else core.scalar_dtype(a)
        db = b.dtype if not b_weak else core.scalar_dtype(b)
        if op in ("and", "or", "xor", "lshift", "rshift") and (da.kind == "f" or db.kind == "f"):
            raise TypeError(f"operator {op} needs integer operands, got {da.name} and {db.name}")
        d = core.promote(da, db, a_weak, b_weak, div=(op == "truediv"))
        a, b = self._as_node(a, d if a_weak else None), self._as_node(b, d if b_weak else None)
        shape = N.broadcast_shapes(a.shape, b.shape, what=f"operator {op}")
        if op in N.CMP or op in ("logical_and", "logical_or"):
            node = Bin(op, a, b, shape, core.int1)
            node.operand_dtype = d
        elif op == "truediv" and d is core.float32 and shape and shape[-1] > 1 and \
                (not b.shape or (len(b.shape) == len(shape) and b.shape[-1] == 1)):
            # A block over a value constant along its rows: times the
            # reciprocal, taken once per row (as the library's softmax
            # scales; within the accuracy of Triton's float32 division).
            recip = Bin("truediv", Sca("1.0f", core.float32), Cast(b, d) if b.dtype is not d else b,
                        b.shape, d)
            node = Bin("mul", a, self.node_out(recip) if not b.shape else recip, shape, d)
        else:
            node = Bin(op, a, b, shape, d)
        return self.node_out(node)

    def unary(self, op, v, d=None):
        v = self._as_node(v)
        if d is None:
            d = v.dtype
            if op in _FLOAT_ONLY and d.kind != "f":
                d = core.float32
        if op == "exp" and d.ctype == "float" and N.non_positive(v):
            op = "exp_neg"
        return self.node_out(Un(op, v, d))

    def ptr_arith(self, op, a, b):
        if isinstance(b, Ptr) and op == "add":
            a, b = b, a
        if not isinstance(a, Ptr) or isinstance(b, Ptr) or op not in ("add", "sub"):
            if isinstance(a, Ptr) and isinstance(b, Ptr) and op in N.CMP:
                raise TypeError("pointers cannot be compared")
            raise TypeError(f"pointer arithmetic supports ptr + int and ptr - int, not {op}")
        bn = self._as_node(b)
        if bn.dtype.kind == "f":
            raise TypeError("a pointer offset must be an integer, got " + bn.dtype.name)
        if op == "sub":
            bn = self.unary("neg", bn)
        if not bn.shape:
            soff = bn if a.soff is None else self.binop("add", a.soff, bn)
            return Ptr(a.arg, soff, a.boff)
        boff = bn if a.boff is None else Bin("add", a.boff, bn, N.broadcast_shapes(a.boff.shape, bn.shape),
                                            core.promote(a.boff.dtype, bn.dtype))
        return Ptr(a.arg, a.soff, boff)


class _Method:
    def __init__(self, obj, name):
        self.obj, self.name = obj, name


def _elem_ctype(d):
    return {"float16": "uint16_t", "bfloat16": "uint16_t", "int1": "uint8_t"}.get(d.name, d.ctype)


def _truth(v):
    return bool(v.value if isinstance(v, core.constexpr) else v)


def _has_return(s):
    return any(isinstance(n, ast.Return) for n in ast.walk(s))


_FLOAT_ONLY = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "sin", "cos", "tanh", "erf"}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift", ast.Pow: "pow"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


_PY_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
           "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
           "lshift": lambda a, b: a << b, "rshift": lambda a, b: a >> b, "pow": lambda a, b: a ** b,
           "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
           "logical_and": lambda a, b: a and b, "logical_or": lambda a, b: a or b,
           "minimum": min, "maximum": max}
