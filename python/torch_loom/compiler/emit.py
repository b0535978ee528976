"""The emitters' contract: what each op of the kernel IR means, and the
interface a target language (a *dialect*) implements to turn kernels of
the kernel IR (ir.LoopKernel) into source.

The IR knows no language; a dialect knows no graph. ``emit_c.CDialect``
writes C11 against ``loom/kernel_abi.h`` for the host (the JIT compiles
it); an OpenCL C dialect would implement the same interface for the same
kernels (a work-item per chunk, its own math library), leaving the IR,
the lowering and the fusion untouched.
"""

from __future__ import annotations

from .ir import LoopKernel

#: The ops of the kernel IR and their arity. Operands are converted to the
#: op's compute kind; the result is rounded to the statement's dtype. In
#: the descriptions x, y, z are the operands and p0, p1 the parameters.
OPS = {
    # unary
    "identity": 1, "neg": 1, "abs": 1, "relu": 1, "sign": 1, "floor": 1, "ceil": 1, "trunc": 1,
    "round": 1,                       # to nearest even
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1,
    "sqrt": 1, "rsqrt": 1, "square": 1, "cube": 1, "inv_square": 1, "reciprocal": 1,
    "sin": 1, "cos": 1, "tan": 1, "atan": 1, "asin": 1, "acos": 1, "sinh": 1, "cosh": 1,
    "tanh": 1, "sigmoid": 1, "silu": 1, "erf": 1, "erfc": 1, "gelu": 1, "gelu_tanh": 1,
    "pow_scalar": 1,                  # x ** p0
    "rpow_scalar": 1,                 # p0 ** x
    "clamp": 1,                       # min(max(x, p0), p1), NaN kept
    "isnan": 1, "isinf": 1, "logical_not": 1, "bitwise_not": 1,
    # binary
    "add": 2, "sub": 2, "add_alpha": 2, "sub_alpha": 2,   # x +- p0 * y
    "mul": 2, "div": 2, "div_trunc": 2, "div_floor": 2, "pow": 2,
    "maximum": 2, "minimum": 2,       # NaN-propagating
    "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2,
    "logical_and": 2, "logical_or": 2, "logical_xor": 2,
    "bitwise_and": 2, "bitwise_or": 2, "bitwise_xor": 2,
    "threshold_backward": 2,          # y <= p0 ? 0 : x
    "sigmoid_backward": 2, "tanh_backward": 2,             # y: the forward result
    "silu_backward": 2,                                    # y: the forward input
    "gelu_backward": 2, "gelu_tanh_backward": 2,           # y: the forward input
    "lerp_scalar": 2,                 # x + p0 (y - x), the library's two forms
    # ternary
    "where": 3,                       # x ? y : z
    "addcmul": 3, "addcdiv": 3,       # x + p0 * y * z, x + p0 * y / z
    "lerp": 3,                        # x + z (y - x), the library's two forms
}

#: The folds of Accumulate statements.
FOLDS = ("sum", "max", "min")


class Dialect:
    """A target language for the kernel IR."""

    #: Short name, for logs and caches.
    name = "abstract"

    def prelude(self) -> str:
        """What every module starts with (headers, shared helpers)."""
        raise NotImplementedError

    def kernel(self, k: LoopKernel) -> str:
        """The source of one kernel, named k.name."""
        raise NotImplementedError

    def module(self, kernels: list[LoopKernel]) -> str:
        """One compilation unit holding all `kernels`."""
        return self.prelude() + "".join(self.kernel(k) for k in kernels)

    def missing(self, k: LoopKernel) -> list[str]:
        """Ops of `k` this dialect cannot spell (empty when it can emit k)."""
        return []
