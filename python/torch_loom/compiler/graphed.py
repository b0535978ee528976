"""``torch.compile(model, backend="loom", mode="reduce-overhead")``.

Each ATen graph the loom backend compiles (forward, backward, inference)
is run once as compiled, then captured into a loom graph
(``torch.loom.Graph``) on a side stream and from then on replayed: a call
copies the inputs that are not where the capture read them into its static
buffers, replays (one call into the runtime for the whole graph, whatever
the number of kernels), copies back the inputs the graph mutates, and
returns copies of the static outputs (a later replay rewrites those).
Parameters and buffers (Dynamo's static inputs) are read in place.

Random ops (dropout, rand, ...) are captured too: each replay draws from
the loom generator's state at that replay (``torch.loom.graph``), so a
reduce-overhead model draws what it would draw run as compiled.

A graph that cannot be captured runs as compiled, after one log line
saying why: symbolic sizes (dynamic shapes), inputs that are not loom
tensors (CPU scalars, Python numbers), or a capture the runtime refused
(an op reading the device from the host).
"""

from __future__ import annotations

import dataclasses
import logging
import operator

import torch

log = logging.getLogger("torch_loom.compiler")

WARMUP_CALLS = 1
#: Captures kept per graph, one per set of parameter and buffer addresses.
MAX_CAPTURES = 8


@dataclasses.dataclass
class Stats:
    captures: int = 0
    replays: int = 0
    fallbacks: int = 0


stats = Stats()
_data_ptr = torch.Tensor.data_ptr
_logged: set = set()


def counters() -> dict:
    """Graphs captured, replays, and graphs that run as compiled instead."""
    return dataclasses.asdict(stats)


def _fall_back(tag: str, reason: str) -> None:
    stats.fallbacks += 1
    if reason not in _logged:
        _logged.add(reason)
        log.warning("torch_loom: mode='reduce-overhead' runs %s without graph replay: %s", tag,
                    reason)


def _static_reason(gm) -> str | None:
    """Why the graph cannot be captured, judged from the graph alone."""
    from .backend import _symbolic

    if _symbolic(gm):
        return "symbolic sizes (dynamic shapes)"
    return None


def _mutated_inputs(gm) -> list[int]:
    """Indices of the inputs the graph writes: copy_ into a placeholder,
    or an in-place op (index_put_, ...) whose schema writes its argument."""
    index = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    out = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            continue
        formals = {f.name: f for f in schema.arguments}
        bound = list(zip(schema.arguments, node.args))
        bound += [(formals[k], a) for k, a in node.kwargs.items() if k in formals]
        for formal, a in bound:
            written = formal.alias_info is not None and formal.alias_info.is_write
            if written and isinstance(a, torch.fx.Node) and a in index:
                out.add(index[a])
    return sorted(out)


def _static_indices() -> set:
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    return set(getattr(meta, "static_input_indices", None) or ())


@dataclasses.dataclass
class _Capture:
    graph: object
    inputs: list
    outputs: list


class Graphed:
    """A compiled graph (boxed) that is captured after its warm-up calls
    and replayed from then on.

    Parameters and buffers are read in place, so a capture is good only for
    the ones it read: one graph serves every module of a class (Dynamo
    lifts their parameters into inputs), and a second model's parameters
    must neither be copied over the first's nor replayed through them. A
    capture is kept for each set of static-input addresses met (at most
    MAX_CAPTURES; past that a call runs as compiled)."""

    _boxed_call = True

    def __init__(self, compiled, gm, tag: str):
        self.compiled = compiled
        self.tag = tag
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.mutated = _mutated_inputs(gm)
        # (the tracing context's static indices are the forward's: a
        # backward's inputs are saved tensors and gradients)
        self.static = _static_indices() if tag != "backward" else set()
        self.calls = 0
        self.captures = {}  # static inputs' addresses -> _Capture
        self.static_positions = None
        self.eager = False
        reason = _static_reason(gm)
        if reason:
            self._give_up(reason)

    def _give_up(self, reason):
        self.eager = True
        self.captures = {}
        _fall_back(self.tag, reason)

    def _key(self, args):
        if self.static_positions is None:
            self._positions(args)
        return tuple(map(_data_ptr, self._static_of(args)))

    def _positions(self, args):
        """Which inputs are read in place (parameters and buffers: the key
        of a capture) and which are copied into its buffers."""
        self.static_positions = tuple(
            i for i, a in enumerate(args)
            if i in self.static or isinstance(a, torch.nn.Parameter))
        static = set(self.static_positions)
        self.copied = tuple(i for i in range(len(args)) if i not in static)
        self.copied_back = tuple(i for i in self.mutated if i not in static)
        getter = operator.itemgetter(*self.static_positions) if self.static_positions else None
        self._static_of = (lambda a: ()) if getter is None else \
            (lambda a: (getter(a),)) if len(self.static_positions) == 1 else getter

    def __call__(self, args):
        if self.eager or self.calls < WARMUP_CALLS:
            self.calls += 1
            return self.compiled(args)
        key = self._key(args)
        capture = self.captures.get(key)
        if capture is not None:
            return self._replay(capture, args)
        if len(self.captures) >= MAX_CAPTURES:
            _fall_back(self.tag, f"more than {MAX_CAPTURES} sets of parameter addresses")
            return self.compiled(args)
        return self._capture(args, key)

    def _capture(self, args, key):
        for a in args:
            if not isinstance(a, torch.Tensor):
                self._give_up(f"an input of type {type(a).__name__} (dynamic shapes or a "
                              "Python number)")
                return self.compiled(args)
            if a.device.type != "loom":
                self._give_up(f"an input on {a.device} (CPU scalars stay on the host)")
                return self.compiled(args)
        # Static buffers: parameters and buffers in place, the rest copied
        # into memory these captures own.
        static = set(self.static_positions)
        inputs = [a if i in static
                  else torch.empty_strided(a.size(), a.stride(), dtype=a.dtype,
                                           device=a.device).copy_(a)
                  for i, a in enumerate(args)]
        graph = torch.loom.Graph()
        try:
            with torch.loom.device(inputs[0].device if inputs else None), torch.loom.graph(graph):
                outputs = self.compiled(list(inputs))
        except RuntimeError as error:
            self._give_up(f"the capture failed ({str(error).splitlines()[0]})")
            return self.compiled(args)
        capture = _Capture(graph, inputs, outputs)
        self.captures[key] = capture
        stats.captures += 1
        return self._replay(capture, args)

    def _replay(self, capture, args):
        # The static inputs are those the capture read (its key): only the
        # others are copied in, and only those the graph writes copied back.
        given = list(args)
        args.clear()
        inputs = capture.inputs
        for i in self.copied:
            static, a = inputs[i], given[i]
            if static.data_ptr() != a.data_ptr():
                static.copy_(a)
        capture.graph.replay()
        stats.replays += 1
        for i in self.copied_back:
            if given[i].data_ptr() != inputs[i].data_ptr():
                given[i].copy_(inputs[i])
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in capture.outputs]


def _graphed_compiler(kind):
    from .backend import _compiler

    inner = _compiler(kind)

    def compiler(gm, example_inputs):
        return Graphed(inner(gm, example_inputs), gm, kind)

    return compiler


def graphed_backend(gm: torch.fx.GraphModule, example_inputs):
    """``backend="loom"`` with ``mode="reduce-overhead"``."""
    from .backend import _aot

    return _aot(_graphed_compiler)(gm, example_inputs)
