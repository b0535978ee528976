"""Inductor's C++ kernels as loom kernels, launched on the current stream.

Inductor's C++ backend writes one function per group of fused nodes: a
sequence of loop nests, each parallelized with OpenMP (``#pragma omp
parallel`` / ``omp for``) and run on the calling thread. On loom each loop
nest becomes a kernel of its own, with loom's kernel ABI
(``loom/kernel_abi.h``), registered in the kernel registry and launched on
the current stream like a library kernel: compiled graphs stay
asynchronous, extern kernels (matmul, convolution, attention) and generated
kernels are ordered by the stream, and the work runs on loom's worker pool.

The parallel dimension of a nest's launch is the iteration space of its
outermost parallel loops, as Inductor chose them (``decide_parallel_depth``
with loom's worker count): the kernel gets ``[begin, end)`` of it and runs
the loops for those iterations only (collapsed loops are recovered by
division). Only loops over independent outputs are split, never a
reduction loop: where Inductor would split a reduction, the loops over
outputs outside it are split instead (a channels-last batch norm's
per-channel sums, by vectors of channels); a nest with no such loop to
share (a sum to one element, say) runs as one chunk, and so does a nest
whose iterations add into shared outputs (Inductor's "atomic_add" stores:
scatter-add, embedding backward), in iteration order. Every output element is therefore
computed by one chunk with the same code, whatever the number of threads
or chunks, and results do not depend on them.

Inductor's parallel reductions (per-thread partial sums combined at the
end) are never generated, and neither is any OpenMP construct: the source
still includes Inductor's ``cpp_prefix.h`` and is compiled by Inductor's
C++ code cache with its flags.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import sympy
import torch
from torch._inductor.codegen.common import BracesBuffer, IndentedBuffer
from torch._inductor.codegen.cpp import (
    CppKernelProxy,
    CppScheduling,
    CppVecKernel,
    KernelGroup,
    LoopLevel,
    ParallelDepth,
    WorkSharing,
)
from torch._inductor.codegen.common import DeferredLine
from torch._inductor.codegen.cpp_utils import cexpr_index
from torch._inductor.utils import get_fused_kernel_name
from torch._inductor import config as inductor_config
from torch._inductor.virtualized import V
from torch.utils._sympy.functions import CeilDiv

def _abi_include() -> str:
    """The #include lines of loom's kernel ABI, with a digest of the headers
    (config.abi_include): Inductor keys its compiled kernels by their source,
    so a change of the headers compiles them again."""
    from . import config

    if not config.abi_include:
        raise RuntimeError("torch.compile on loom: loom's C headers (loom/kernel_abi.h) are missing; "
                           "reinstall torch_loom")
    return config.abi_include


def device_workers(index: int = 0) -> int:
    from .interface import LoomInterface

    return max(1, LoomInterface.Worker.get_device_properties(index).multi_processor_count)


class LoomWorkSharing(WorkSharing):
    """No OpenMP: parallel loops are split by the launch instead."""

    def parallel(self, threads):
        pass

    def single(self):
        return False

    def close(self):
        pass


@dataclass
class LoopNestInfo:
    """One loop nest of a kernel group: its code and the C expression (in
    the kernel's argument names) of its launch range."""

    code: object = None
    range_expr: str = "1"
    split: list = field(default_factory=list)  # the parallel LoopLevels, outermost first
    # Launched as one chunk: its iterations add into shared outputs
    # (scatter-add, embedding backward), in an order that must not depend
    # on the threads.
    serial: bool = False


def _position(loops, loop) -> int:
    return next(i for i, lv in enumerate(loops) if lv is loop)


def _iterations(loop: LoopLevel) -> sympy.Expr:
    return sympy.Max(0, CeilDiv(loop.size - loop.offset, loop.steps))


class LoomLoopLevel(LoopLevel):
    """A loop level whose parallel (and collapsed) loops cover the launch's
    chunk [loom_begin, loom_end) of their iterations instead of an OpenMP
    worksharing loop. Set on Inductor's own LoopLevel objects (same fields)."""

    def lines(self):
        nest: LoopNestInfo | None = getattr(self, "_loom_nest", None)
        if nest is None or not (self.parallel or self.collapsed):
            return super().lines()
        if self.is_reduction:
            raise NotImplementedError("torch.compile on loom: a parallel reduction loop "
                                      "(a reduction that is not split by its outputs)")
        if self.parallel:
            loops = getattr(self, "_loom_loops")
            start = _position(loops, self)
            nest.split = loops[start:start + self.parallel]
            nest.range_expr = cexpr_index(sympy.Mul(*[_iterations(lv) for lv in nest.split]))
        k = _position(nest.split, self)
        var, off, step = self.var, cexpr_index(self.offset), cexpr_index(self.steps)
        if not self.steps.is_number:
            step = f"({step} == 0 ? 1 : {step})"
        if len(nest.split) == 1:
            return [f"for(int64_t {var}={off} + loom_begin*{step}; "
                    f"{var}<{off} + loom_end*{step}; {var}+={step})"]
        # Collapsed loops: one chunk index, split into the levels' indices.
        inner = sympy.Mul(*[_iterations(lv) for lv in nest.split[k + 1:]])
        index = f"(loom_i / {cexpr_index(inner)})" if inner != 1 else "loom_i"
        if k > 0:
            index = f"({index} % {cexpr_index(_iterations(self))})"
        bind = (f"for(int64_t {var}={off} + {index}*{step}, loom_once{k}=1; "
                f"loom_once{k}; loom_once{k}=0)")
        if k == 0:
            return ["for(int64_t loom_i=loom_begin; loom_i<loom_end; ++loom_i)", bind]
        return [bind]


#: Outputs of at least this many bytes are written with cache-bypassing
#: stores, as the library's pointwise kernels write theirs
#: (LOOM_STREAM_STORE_BYTES in base/stream_store.h): they would not stay in
#: the last-level cache anyway, and a normal store first reads each line.
STREAM_STORE_BYTES = 32 * 1024 * 1024

# loom_stream_store(v, p): v's lanes to p with a non-temporal store where p
# is aligned to the vector (else an ordinary one); loom_stream_fence()
# orders them before the kernel returns.
_STREAM_STORE_HELPERS = r"""
#if defined(CPU_CAPABILITY_AVX512)
static inline void loom_stream_store(const at::vec::Vectorized<float>& v, float* p) {
    if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) _mm512_stream_ps(p, v); else v.store(p);
}
static inline void loom_stream_fence() { _mm_sfence(); }
#elif defined(CPU_CAPABILITY_AVX2)
static inline void loom_stream_store(const at::vec::Vectorized<float>& v, float* p) {
    if ((reinterpret_cast<uintptr_t>(p) & 31) == 0) _mm256_stream_ps(p, v); else v.store(p);
}
static inline void loom_stream_fence() { _mm_sfence(); }
#else
static inline void loom_stream_store(const at::vec::Vectorized<float>& v, float* p) { v.store(p); }
static inline void loom_stream_fence() {}
#endif
"""


# loom_store_mask(m, p, count): the first `count` lanes of vector mask m
# (each lane all ones or all zeros) to bools at p. Inductor's VecMask::store
# converts the mask to a Vectorized<bool> through its generic lane-by-lane
# path, about 0.2 us per 16 floats: a ReLU's saved mask for the backward
# (1M elements) took 11 ms to write on one thread, 70x the ReLU itself.
# loom_load_mask<M>(p, count): `count` bools at p as vector mask M (lanes
# past count false), which VecMask::from builds lane by lane.
_MASK_STORE_HELPERS = r"""
template <typename V>
static inline void loom_store_mask(const V& v, bool* p, int64_t count) { v.store(p, count); }
template <typename T, int N>
static inline void loom_store_mask(const at::vec::VecMask<T, N>& m, bool* p, int64_t count) {
    constexpr int L = at::vec::Vectorized<T>::size();
    __at_align__ T lanes[L * N];
    for (int i = 0; i < N; ++i) m[i].store(lanes + i * L);
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(lanes);
    for (int64_t i = 0; i < count; ++i) p[i] = bytes[i * sizeof(T)] != 0;
}
#if defined(CPU_CAPABILITY_AVX512)
static inline void loom_store_mask(const at::vec::VecMask<float, 1>& m, bool* p, int64_t count) {
    const __m512i lanes = _mm512_castps_si512(at::vec::Vectorized<float>(m));
    const __m128i ones = _mm512_cvtepi32_epi8(_mm512_and_si512(lanes, _mm512_set1_epi32(1)));
    if (count == 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), ones);
    else _mm_mask_storeu_epi8(p, static_cast<__mmask16>((1u << count) - 1), ones);
}
#endif
template <typename M>
static inline M loom_load_mask(const bool* p, int64_t count) { return M::from(p, static_cast<int>(count)); }
#if defined(CPU_CAPABILITY_AVX512)
template <>
inline at::vec::VecMask<float, 1> loom_load_mask<at::vec::VecMask<float, 1>>(const bool* p, int64_t count) {
    const __m128i bytes = count == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                      : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << count) - 1), p);
    const __mmask16 set = _mm_test_epi8_mask(bytes, bytes);
    return at::vec::Vectorized<float>(_mm512_castsi512_ps(_mm512_maskz_set1_epi32(set, -1)));
}
#endif
"""


def _static_bytes(name: str) -> int | None:
    """The bytes of buffer `name` when its size is static, else None."""
    try:
        buf = V.graph.get_buffer(name)
        numel = sympy.Mul(*buf.get_size())
        if not numel.is_number:
            return None
        return int(numel) * buf.get_dtype().itemsize
    except (AttributeError, KeyError, TypeError):
        return None


class LoomCppVecKernel(CppVecKernel):
    """Inductor's vectorized C++ kernel, whose full-vector float32 stores to
    an output of STREAM_STORE_BYTES or more (contiguous along the vector,
    not read by the kernel) bypass the cache."""

    def _get_vec_load_line(self, var, index, dtype, load_mask=None):
        if dtype != torch.bool:
            return super()._get_vec_load_line(var, index, dtype, load_mask)
        # Inductor ignores load_mask for bool loads too: tail lanes are
        # limited by the count.
        loadbuf = f"{var} + {cexpr_index(index)}" if index != 0 else var
        return (f"loom_load_mask<{self._get_mask_type()}>({loadbuf}, "
                f"{cexpr_index(self.num_elems)})")

    def _get_store_line(self, value, var, index, dtype, accu_store=False):
        # Bool outputs (masks saved for a backward) through loom_store_mask.
        if dtype == torch.bool and not accu_store and \
                self._try_get_const_stride(index, self.itervars[self.tiling_idx]) == 1:
            code = IndentedBuffer()
            code.writeline(f"loom_store_mask({value}, {var} + {cexpr_index(index)}, "
                           f"{cexpr_index(self.num_elems)});")
            return code
        return super()._get_store_line(value, var, index, dtype, accu_store=accu_store)

    def store(self, name, index, value, mode=None):
        var = self.args.output(name)
        if (mode is not None or self.tail_size is not None or not getattr(value, "is_vec", False)
                or V.graph.get_dtype(name) != torch.float32 or var.startswith("in_out_ptr")
                or (_static_bytes(name) or 0) < STREAM_STORE_BYTES):
            return super().store(name, index, value, mode)
        index = self.rename_indexing(index)
        if self._try_get_const_stride(index, self.itervars[self.tiling_idx]) != 1:
            return super().store(name, index, value, mode)
        line = f"loom_stream_store({value}, {var} + {cexpr_index(index)});"
        self.stores.writeline(DeferredLine(name, line))


class LoomCppKernelProxy(CppKernelProxy):
    vec_kernel_cls = LoomCppVecKernel

    def decide_parallel_depth(self, max_parallel_depth, threads):
        par = super().decide_parallel_depth(max_parallel_depth, device_workers())
        loops = self.loop_nest.loops if self.loop_nest is not None else None
        if not par.parallel_depth or not loops:
            return par
        start = par.start_depth
        # Only independent outputs are split. Where Inductor would split a
        # reduction loop (or starts below the outermost loop, which only
        # happens at a reduction) -- a per-channel sum over the rows of a
        # channels-last tensor, whose few vectors of channels Inductor leaves
        # to one thread -- the outer loops over outputs are split instead,
        # if they have iterations to share; else the nest runs as one chunk.
        if start != 0 or start >= len(loops) or loops[start].is_reduction:
            return self._split_outputs(max_parallel_depth, loops)
        return par

    def _split_outputs(self, max_parallel_depth, loops):
        outer = 0
        while outer < len(loops) and not loops[outer].is_reduction:
            outer += 1
        # LoopNest.mark_parallel checks the depth against its own maximum
        # (the reduction loops' count when Inductor chose them).
        outer = min(outer, max_parallel_depth.parallel_depth)
        if outer == 0:
            return ParallelDepth(parallel_depth=0, start_depth=0)
        par = super().decide_parallel_depth(ParallelDepth(parallel_depth=outer, start_depth=0),
                                            device_workers())
        if not par.parallel_depth:
            return ParallelDepth(parallel_depth=0, start_depth=0)
        return ParallelDepth(parallel_depth=par.parallel_depth, start_depth=0)

    def codegen_loops(self, code, worksharing):
        nest = LoopNestInfo(code=code)
        loops = (self.loop_nest.loops if self.loop_nest is not None else None) or []
        for loop in loops:
            loop.__class__ = LoomLoopLevel
            loop._loom_nest = nest
            loop._loom_loops = loops
        self.loom_nest = nest
        super().codegen_loops(code, worksharing)


class LoomKernelGroup(KernelGroup):
    """A kernel group whose loop nests become one loom kernel each."""

    def __init__(self):
        super().__init__()
        self.ws = LoomWorkSharing(self.loops_code)
        self.nests: list[LoopNestInfo] = []

    def finalize_kernel(self, new_kernel, nodes):
        self.scheduled_nodes += nodes
        code = BracesBuffer()
        new_kernel.codegen_loops(code, self.ws)
        nest = getattr(new_kernel, "loom_nest", None) or LoopNestInfo()
        nest.code = code
        # Inductor's C++ stores that accumulate into outputs other iterations
        # also write (mode "atomic_add") are the only ones that do.
        nest.serial = "atomic_add" in code.getvalue()
        self.nests.append(nest)

    def codegen_group(self, name=None) -> str:
        self.stack.close()
        if not self.scheduled_nodes:
            return ""
        arg_defs, _, arg_types = self.args.cpp_argdefs()
        code = BracesBuffer()
        code.writeline("#include <torch/csrc/inductor/cpp_prefix.h>")
        code.splice(_abi_include())
        sources = "".join(n.code.getvalue() for n in self.nests)
        if "loom_stream_store(" in sources:
            code.splice(_STREAM_STORE_HELPERS)
        if "loom_store_mask(" in sources or "loom_load_mask<" in sources:
            code.splice(_MASK_STORE_HELPERS)
        for i, nest in enumerate(self.nests):
            params = ", ".join([*arg_defs, "int64_t loom_begin", "int64_t loom_end"])
            code.writeline(f"static void loom_nest_{i}({params})")
            with code.indent():
                for old, new in self.args.aliases():
                    code.writeline(f"auto {old} = {new};")
                code.splice(nest.code)
            code.writeline(f'extern "C" int64_t loom_range_{i}(const loom_scalar* loom_s)')
            with code.indent():
                for k, (d, t) in enumerate(_scalar_args(arg_defs, arg_types)):
                    code.writeline(f"{d} = loom_s[{k}].{'f' if 'float' in t else 'i'}; (void){d.split()[-1]};")
                code.writeline(f"return {nest.range_expr};")
            code.writeline(f'extern "C" int loom_entry_{i}(const loom_kernel_args* loom_a, '
                           "int64_t loom_begin, int64_t loom_end)")
            with code.indent():
                code.writeline("if (loom_a->abi_version != LOOM_KERNEL_ABI_VERSION) "
                               "return LOOM_ERROR_INVALID_ARGUMENT;")
                code.writeline("try")
                with code.indent():
                    code.writeline(f"loom_nest_{i}({''.join(_unpack(arg_types))}loom_begin, loom_end);")
                    if "loom_stream_store(" in nest.code.getvalue():
                        code.writeline("loom_stream_fence();")
                # Inductor's kernels report bad indices and integer division
                # by zero with C++ exceptions; the ABI has return codes.
                code.writeline("catch (const std::exception& e)")
                with code.indent():
                    code.writeline('return std::string(e.what()).find("out of bounds") != std::string::npos '
                                   "? LOOM_ERROR_INDEX_OUT_OF_RANGE : LOOM_ERROR_INVALID_ARGUMENT;")
                code.writeline("catch (...)")
                with code.indent():
                    code.writeline("return LOOM_ERROR_INVALID_ARGUMENT;")
                code.writeline("return LOOM_OK;")
        return code.getvalue()


def _is_pointer(arg_type: str) -> bool:
    return arg_type.rstrip().endswith("*")


def _scalar_args(arg_defs, arg_types):
    return [(d, t) for d, t in zip(arg_defs, arg_types) if not _is_pointer(t)]


def _unpack(arg_types) -> list[str]:
    """The nest's arguments from the launch's tensors and scalars, in order."""
    out, tensors, scalars = [], 0, 0
    for t in arg_types:
        if _is_pointer(t):
            out.append(f"({t})(loom_a->tensors[{tensors}].data), ")
            tensors += 1
        else:
            out.append(f"loom_a->scalars[{scalars}].{'f' if 'float' in t else 'i'}, ")
            scalars += 1
    return out


def arg_kinds(arg_types) -> str:
    """Per argument: 't' a tensor, 'i' an integer, 'f' a float."""
    return "".join("t" if _is_pointer(t) else ("f" if "float" in t else "i") for t in arg_types)


class LoomCppScheduling(CppScheduling):
    """Inductor's C++ scheduling, with loom kernels instead of OpenMP ones."""

    kernel_proxy_cls = LoomCppKernelProxy

    def reset_kernel_group(self):
        self.kernel_group = LoomKernelGroup()

    def codegen_template(self, *args, **kwargs):
        raise NotImplementedError("torch.compile on loom: Inductor's C++ templates are not supported")

    def define_kernel(self, src_code, nodes, kernel_args=None):
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        fused = (get_fused_kernel_name(nodes, inductor_config.cpp.descriptive_names)
                 if inductor_config.cpp.descriptive_names else "")
        kernel_name = "_".join(["loom_cpp", fused, wrapper.next_kernel_suffix()])
        wrapper.src_to_kernel[src_code] = kernel_name
        args = self.kernel_group.args if kernel_args is None else kernel_args
        _, _, arg_types = args.cpp_argdefs()
        # The registry names the kernels after their source.
        key = hashlib.sha256(src_code.encode()).hexdigest()[:24]
        serial = "".join("s" if nest.serial else "p" for nest in self.kernel_group.nests)
        wrapper.define_kernel(
            kernel_name,
            f"loom_cpp_kernel(async_compile, {key!r}, {arg_kinds(arg_types)!r}, {serial!r}, r'''\n"
            f"{src_code}''')",
            gpu=False)
        return kernel_name
