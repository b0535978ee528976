"""Scatters into an input updated in place (a KV cache's ``index_copy_``).

Functionalization turns ``cache.index_copy_(2, pos, k)`` on a graph input
into ``new = index_put(cache, [None, None, pos], k)`` (a copy of the whole
cache with a few rows replaced), the graph's readers then read ``new``, and
the graph ends with ``copy_(cache, new)`` (the whole cache copied back). A
decode step of a GPT does that for the keys and the values of every layer:
two passes over each cache where eager writes a few rows.

Where the input is read by nothing but the scatter and the final copy_, the
scatter runs in place (``index_put_``, the op eager runs), its readers read
the input itself, and the copy_ goes: the same values, in the same memory,
at the same point of the graph. Where anything else reads the input (its
value before the scatter), or the scatter's result is a graph output (it
would alias the input), the graph is left as it is.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

#: Functional scatters -> their in-place forms (self is the first argument).
IN_PLACE = {
    aten.index_put.default: aten.index_put_.default,
    aten.index_copy.default: aten.index_copy_.default,
}


def scatter_in_place(gm: torch.fx.GraphModule) -> int:
    """Rewrites gm's scatters into inputs that its copy_ nodes write back;
    returns how many."""
    graph = gm.graph
    outputs = set(next(n for n in reversed(graph.nodes) if n.op == "output").all_input_nodes)
    done = 0
    for copy in list(graph.nodes):
        if copy.op != "call_function" or copy.target is not aten.copy_.default or copy.users:
            continue
        dst, new = copy.args[0], copy.args[1]
        if not (isinstance(dst, torch.fx.Node) and dst.op == "placeholder"
                and isinstance(new, torch.fx.Node) and new.op == "call_function"
                and new.target in IN_PLACE and new.args and new.args[0] is dst
                and not copy.kwargs and new not in outputs):
            continue
        if set(dst.users) != {new, copy}:
            continue  # something reads the input's value before the scatter
        if not _same_layout(dst, new):
            continue
        new.target = IN_PLACE[new.target]
        graph.erase_node(copy)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done


def _same_layout(dst, new) -> bool:
    """The scatter's result has the input's shape, dtype and strides (the
    in-place op returns the input itself)."""
    a, b = dst.meta.get("val"), new.meta.get("val")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride() \
        and a.device == b.device
