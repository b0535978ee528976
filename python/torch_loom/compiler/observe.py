"""What the compiler did: ``LOOM_COMPILE_LOG`` and :func:`counters`.

``LOOM_COMPILE_LOG`` is a comma-separated list of topics (or ``all``):
``graph`` (the graph IR), ``fusion`` (each kernel with the ops it fused,
each library call), ``code`` (the generated C and the Python that runs the
graph), ``cache`` (where each compiled module came from: compiled, the
disk cache, or already loaded). Messages go to the ``torch_loom.compiler``
logger, which writes to stderr when a topic is on and nothing else handles
it. The variable is read at each compile.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref

from . import jit

logger = logging.getLogger("torch_loom.compiler")
TOPICS = ("graph", "fusion", "code", "cache")

_lock = threading.Lock()


class Totals:
    """Counters the generated programs bump on every call."""
    __slots__ = ("calls", "launches", "library_calls", "epilogues")

    def __init__(self):
        self.calls = self.launches = self.library_calls = self.epilogues = 0


totals = Totals()
_programs = weakref.WeakSet()
_serials = itertools.count()
_compile = {}
_jit_base = {}


def _zero():
    _compile.update(graphs_compiled=0, graphs_fallen_back=0, kernels_generated=0, fused_ops=[],
                    gemm_epilogues=0, epilogue_ops=[], batch_norm_relu=0,
                    batch_norm_relu_backward=0, conv_planes=0, attention_packed=0,
                    attention_contiguous=0,
                    graphs_dynamic=0, specializations=0,
                    compile_seconds=0.0, modules_compiled=0, modules_cached=0, modules_resident=0,
                    zero_tangents_eliminated=0, zero_tangents_materialized=0)


_zero()


def reset_counters():
    """Zeroes every counter (the JIT's own counters are read relative to now)."""
    with _lock:
        _zero()
        totals.calls = totals.launches = totals.library_calls = totals.epilogues = 0
        _jit_base.clear()
        _jit_base.update(jit.stats())


def counters() -> dict:
    """The compiler's counters since the process started (or
    :func:`reset_counters`):

    - ``graphs_compiled``: graphs (forward, backward, inference) turned
      into programs; ``graphs_fallen_back`` those run by the graph's own
      eager code because the C compiler is missing or failed;
    - ``graphs_dynamic``: those of them with symbolic sizes, and
      ``specializations``: the programs built for the concrete sizes they
      met (all of one graph share its C module);
    - ``kernels_generated``, and ``fused_ops``: for each generated kernel in
      order, how many graph ops it fused;
    - ``gemm_epilogues``, and ``epilogue_ops``: matrix products compiled
      with elementwise ops fused into their output tiles (one library call
      each), and for each the ops it took;
    - ``batch_norm_relu`` and ``batch_norm_relu_backward``: batch norms
      compiled with the ReLU after them (and a residual add before it) as
      one library call, and batch-norm backwards that mask the ReLU's
      gradient themselves (batchnorm.py);
    - ``conv_planes``: convolutions of a training step whose weight
      gradient reads the zero-padded planes their forward made, instead of
      padding the input again (planes.py);
    - ``attention_packed``: attention backwards that write their three
      gradients into the slices of the projection's gradient, instead of a
      cat copying them there (attention.py);
    - ``attention_contiguous``: attentions (forwards, backwards) over
      strided bfloat16/float16 heads that run over contiguous copies, their
      results in the traced layout (attention_contiguous.py);
    - ``graph_calls``, ``kernel_launches``, ``library_calls`` and
      ``epilogue_calls``: calls of compiled graphs and what they enqueued
      (so a call's launches are the difference across it; an epilogue call
      is a library call too);
    - ``modules_compiled``/``modules_cached``/``modules_resident``: where
      each program's C module came from (the compiler, the disk cache, this
      process);
    - ``cache_hits``, ``cache_misses``, ``compiler_invocations`` and
      ``cc_seconds``: the JIT's counters (jit.stats());
    - ``zero_tangents_eliminated`` and ``zero_tangents_materialized``:
      output gradients autograd left undefined (an output the loss does not
      use) for which a backward variant was built, with the zero
      eliminated from the graph, or passed as zeros (tangents.py);
    - ``compile_seconds``: time spent compiling graphs (lowering, fusion,
      emission and waiting for the C compiler);
    - ``programs``: for each compiled graph still alive, its ``tag``
      (forward/backward/inference and a number), ``kernels``, the kernel
      ``launches`` and ``library_calls`` each of its calls makes, and its
      ``calls`` so far.
    """
    s = jit.stats()
    with _lock:
        out = dict(_compile)
        out["fused_ops"] = list(_compile["fused_ops"])
        out["epilogue_ops"] = list(_compile["epilogue_ops"])
        out.update(graph_calls=totals.calls, kernel_launches=totals.launches,
                   library_calls=totals.library_calls, epilogue_calls=totals.epilogues)
        for key, name in (("cache_hits", "cache_hits"), ("cache_misses", "cache_misses"),
                          ("compiler_invocations", "compiler_invocations"),
                          ("compile_seconds", "cc_seconds")):
            out[name] = s[key] - _jit_base.get(key, 0)
        programs = sorted(_programs, key=lambda p: p.serial)
    out["programs"] = [dict(tag=p.tag, kernels=len(p.kernels), launches=p.launches,
                            library_calls=p.library_calls, epilogues=len(p.epilogues),
                            calls=p.calls) for p in programs]
    return out


def record_graph(program, seconds, specialization=False):
    with _lock:
        program.serial = next(_serials)
        _programs.add(program)
        if specialization:  # a graph counted once, by record_dynamic_graph
            _compile["specializations"] += 1
            _compile["compile_seconds"] += seconds
            return
        _compile["graphs_compiled"] += 1
        _compile["kernels_generated"] += len(program.kernels)
        _compile["fused_ops"].extend(k.ops for k in program.kernels)
        _compile["gemm_epilogues"] += len(program.epilogues)
        _compile["epilogue_ops"].extend(list(e) for e in program.epilogues)
        for name in getattr(program, "batch_norms", ()):
            _compile[name] += 1
        _compile["compile_seconds"] += seconds


def record_zero_tangents(count, eliminated):
    with _lock:
        key = "zero_tangents_eliminated" if eliminated else "zero_tangents_materialized"
        _compile[key] += count


def record_conv_planes(count):
    with _lock:
        _compile["conv_planes"] += count


def record_attention_packed(count):
    with _lock:
        _compile["attention_packed"] += count


def record_attention_contiguous(count):
    with _lock:
        _compile["attention_contiguous"] += count


def record_dynamic_graph():
    with _lock:
        _compile["graphs_compiled"] += 1
        _compile["graphs_dynamic"] += 1


def record_fallback():
    with _lock:
        _compile["graphs_fallen_back"] += 1


def add_seconds(seconds):
    with _lock:
        _compile["compile_seconds"] += seconds


_seen_modules = set()


def record_module(program, module):
    """Counts where a program's module came from. One this process loaded
    before is "resident" (the JIT hands out the module it holds)."""
    with _lock:
        origin = "resident" if module.key in _seen_modules else module.origin
        _seen_modules.add(module.key)
        _compile[f"modules_{origin}"] = _compile.get(f"modules_{origin}", 0) + 1
    log = Log()
    if log.on("cache"):
        log.emit("cache", f"{program.tag}: module {module.key[:16]} {origin} "
                          f"({len(program.kernels)} kernels)")


class Log:
    def __init__(self):
        raw = os.environ.get("LOOM_COMPILE_LOG", "")
        wanted = {t.strip() for t in raw.split(",") if t.strip()}
        self.topics = set(TOPICS) if "all" in wanted else wanted & set(TOPICS)
        if self.topics and not logger.hasHandlers():
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[loom compile %(message)s"))
            logger.addHandler(handler)
        if self.topics and logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)

    def on(self, topic) -> bool:
        return topic in self.topics

    def emit(self, topic, text):
        logger.info("%s] %s", topic, text)

    def graph(self, tag, graph):
        if self.on("graph"):
            self.emit("graph", f"{tag}\n{graph}")

    def fusion(self, program):
        if not self.on("fusion"):
            return
        lines = [f"{program.tag}: {len(program.kernels)} kernels, {program.library_calls} library calls"]
        for k in program.kernels:
            kind = "pointwise" if k.is_pointwise else f"reduction over {list(k.dims[k.n_outer:])}"
            lines.append(f"  {k.name}: {k.ops} ops, {kind}, space {list(k.dims)}: {k.summary}")
        for name in program.library_names:
            lines.append(f"  library: {name}")
        for ops in program.epilogues:
            lines.append(f"  GEMM epilogue: {', '.join(ops)}")
        self.emit("fusion", "\n".join(lines))

    def code(self, program):
        if self.on("code"):
            self.emit("code", f"{program.tag} (C)\n{program.source}\n{program.tag} (Python)\n"
                              f"{program.py_source}")
