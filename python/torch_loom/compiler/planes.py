"""A convolution's input padded once for its forward and its weight gradient.

Loom's padded-row and Winograd convolutions read their input through
zero-padded phase planes ("conv.pad", loom/kernels/conv.h): eager autograd
keeps only the input between the passes, so the forward pads it and the
weight gradient pads it again. In a training step's joint graph both
passes are in view: this pass replaces ``convolution(x, w, ...)`` and the
``convolution_backward(dy, x, w, ...)`` that computes its weight gradient
by ``loom::conv2d_planes`` (the output and the planes) and
``loom::conv2d_planes_backward`` (which takes the planes), before the
partitioner splits the graph, so that the planes are saved for the backward
instead of padded again (csrc/ops/conv/conv_planes.cpp).

Only where the planes exist (the shape function gives them: float32
2-d convolutions of contiguous or channels-last tensors whose forward and weight gradient share a
path and its planes): elsewhere the graph is left as it was. The planes
are a saved tensor like any other: they live from the forward to the
backward, about the input's size (rounded up to the padding and the plane's
whole rows).
"""

from __future__ import annotations

import functools
import operator

import torch

from . import observe

aten = torch.ops.aten

#: Whether the pass runs (off: for measuring its worth).
ENABLED = True


@functools.cache
def _ops():
    import torch_loom  # noqa: F401  (the ops are registered by the extension)

    return torch.ops.loom.conv2d_planes.default, torch.ops.loom.conv2d_planes_backward.default


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _candidate(node) -> bool:
    """A regular 2-d float32 convolution of dense loom tensors."""
    if len(node.args) < 9:
        return False
    x, w = _val(node.args[0]), _val(node.args[1])
    transposed = node.args[6]
    return (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and not transposed and
            _concrete(x) and _concrete(w) and
            x.device.type == "loom" and x.dtype == torch.float32 and
            w.dtype == torch.float32 and x.dim() == 4 and w.dim() == 4 and
            _dense(x) and _dense(w))


def _dense(t) -> bool:
    """Contiguous or channels last: the layouts the shared planes take."""
    return t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)


def _concrete(t) -> bool:
    """Sizes and strides known (a graph with symbolic sizes keeps its
    convolutions: the planes' shape is worked out from concrete sizes)."""
    return all(isinstance(s, int) for s in list(t.shape) + list(t.stride()))


def _same_conv(fwd, bwd) -> bool:
    """Whether convolution_backward node `bwd` is the backward of `fwd`."""
    # convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    # convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask)
    return (bwd.args[1] is fwd.args[0] and bwd.args[2] is fwd.args[1] and
            list(bwd.args[4]) == list(fwd.args[3]) and list(bwd.args[5]) == list(fwd.args[4]) and
            list(bwd.args[6]) == list(fwd.args[5]) and not bwd.args[7] and
            bwd.args[9] == fwd.args[8] and bool(bwd.args[10][1]))


def _fake(fn, args):
    """`fn` on the fake values of its node arguments."""
    from torch._guards import detect_fake_mode

    vals = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    with mode:
        return fn(*vals)


def share_conv_planes(gm: torch.fx.GraphModule) -> int:
    """Rewrites the joint graph `gm` in place; returns how many convolutions
    now share their planes with their weight gradient."""
    if not ENABLED:
        return 0
    graph = gm.graph
    fwd_op, bwd_op = _ops()
    done = 0
    backwards = [n for n in graph.nodes
                 if n.op == "call_function" and n.target is aten.convolution_backward.default]
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.convolution.default:
            continue
        if not _candidate(node):
            continue
        mine = [b for b in backwards if len(b.args) >= 11 and _same_conv(node, b)]
        if len(mine) != 1:
            continue
        bwd = mine[0]
        x, w, b, stride, padding, dilation = node.args[:6]
        groups = node.args[8]
        fargs = (x, w, b, list(stride), list(padding), list(dilation), groups)
        out_val, planes_val = _fake(fwd_op, fargs)
        if planes_val.numel() == 0:
            continue
        with graph.inserting_after(node):
            pair = graph.call_function(fwd_op, fargs)
        pair.meta["val"] = (out_val, planes_val)
        with graph.inserting_after(pair):
            out = graph.call_function(operator.getitem, (pair, 0))
        out.meta["val"] = out_val
        with graph.inserting_after(out):
            planes = graph.call_function(operator.getitem, (pair, 1))
        planes.meta["val"] = planes_val
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        dy, _, _, bias_sizes = bwd.args[:4]
        bargs = (dy, x, w, planes, None if bias_sizes is None else list(bias_sizes),
                 list(stride), list(padding), list(dilation), groups, list(bwd.args[10]))
        with graph.inserting_before(bwd):
            grads = graph.call_function(bwd_op, bargs)
        grads.meta["val"] = bwd.meta.get("val")
        bwd.replace_all_uses_with(grads)
        graph.erase_node(bwd)
        backwards.remove(bwd)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
        observe.record_conv_planes(done)
    return done
