"""Where Inductor 2.13 equates "the C++ backend" with the device "cpu", or
tunes for cuDNN what it does not know.

Inductor generates C++ for the device type "cpu" only; any other device is
assumed to be a Triton GPU in two predicates that the C++ backend relies on.
loom's graphs are scheduled by Inductor's C++ backend, so both answer for
loom as they do for "cpu". Each patch wraps the original, changes its answer
for loom only, and is applied once.

- ``get_current_backend()`` (torch._inductor.utils; imported by name into
  codegen.common, scheduler and kernel.mm_common) names the code generator
  of the current device: ``config.cuda_backend`` ("triton") for any device
  it does not know. The C++ kernel's CSE then propagates dtypes the Triton
  way (bf16/fp16 upcast, ``masked``), and vectorized index expressions lose
  their dtype.
- ``compile_fx()`` reads ``config.fallback_random`` as one global; loom
  graphs need it on (random ops on loom's generator), other graphs keep it.
  Loom graphs also get the GEMM-epilogue post-grad pass (``epilogue.py``,
  which does nothing unless ``config.gemm_epilogues`` is on) and the
  batch-norm-with-ReLU pass (``batchnorm.py``) beside any
  ``post_grad_custom_post_pass`` of the user's.
- ``BaseSchedulerNode.is_cpu()`` is asked in exactly three places, each to
  skip a Triton-only fusion rewrite (loop reordering, loop reindexing, index
  inversion) that assumes Triton's loop groups and breaks on the C++
  backend's.
"""

from __future__ import annotations

import importlib

_CPP_DEVICES = ("loom",)


def _patch_get_current_backend() -> None:
    import torch._inductor.utils as utils

    original = utils.get_current_backend
    if getattr(original, "_loom", False):
        return

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type in _CPP_DEVICES:
            return "cpp"
        return original(device_type)

    get_current_backend._loom = True
    get_current_backend.__wrapped__ = original
    for name in ("torch._inductor.utils", "torch._inductor.codegen.common",
                 "torch._inductor.scheduler", "torch._inductor.kernel.mm_common"):
        module = importlib.import_module(name)
        if getattr(module, "get_current_backend", None) is original:
            module.get_current_backend = get_current_backend


def _patch_scheduler_is_cpu() -> None:
    from torch._inductor.scheduler import BaseSchedulerNode

    original = BaseSchedulerNode.is_cpu
    if getattr(original, "_loom", False):
        return

    def is_cpu(self) -> bool:
        device = self.get_device()
        return (device is not None and device.type in _CPP_DEVICES) or original(self)

    is_cpu._loom = True
    is_cpu.__wrapped__ = original
    BaseSchedulerNode.is_cpu = is_cpu


def _patch_decide_layout_opt() -> None:
    """Inductor converts the convolutions of a graph to channels-last by
    heuristics measured on cuDNN (any device but the CPU's oneDNN). loom's
    convolutions are fastest in the layout eager code gives them
    (contiguous): a loom graph keeps its layouts."""
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.decide_layout_opt
    if getattr(original, "_loom", False):
        return

    def decide_layout_opt(gm, *, is_inference: bool) -> bool:
        for node in gm.graph.nodes:
            val = node.meta.get("val") if node.op == "placeholder" else None
            if getattr(getattr(val, "device", None), "type", None) in _CPP_DEVICES:
                return False
        return original(gm, is_inference=is_inference)

    decide_layout_opt._loom = True
    decide_layout_opt.__wrapped__ = original
    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)


def _graph_on_loom(model, example_inputs) -> bool:
    for x in example_inputs:
        if getattr(getattr(x, "device", None), "type", None) in _CPP_DEVICES:
            return True
    for node in getattr(getattr(model, "graph", None), "nodes", ()):
        if node.op == "placeholder":
            val = node.meta.get("val", node.meta.get("example_value"))
            if getattr(getattr(val, "device", None), "type", None) in _CPP_DEVICES:
                return True
    return False


def _loom_patches(patches: dict) -> dict:
    """compile_fx's config patches for a loom graph: `patches` with
    fallback_random on and the epilogue and batch-norm passes added (each once)."""
    from torch._inductor import config

    from . import batchnorm, epilogue

    extra = {}
    if not config.fallback_random and not patches.get("fallback_random"):
        extra["fallback_random"] = True
    user = patches.get("post_grad_custom_post_pass", config.post_grad_custom_post_pass)
    passes = tuple(user) if isinstance(user, (list, tuple)) else (() if user is None else (user,))
    ours = tuple(p for p in (epilogue.PASS, batchnorm.PASS) if p not in passes)
    if ours:
        extra["post_grad_custom_post_pass"] = (*passes, *ours)
    return {**patches, **extra} if extra else patches


def _patch_compile_fx() -> None:
    """Random ops of a loom graph run as loom's own ops on its Philox
    generator (``fallback_random``), so compiled and eager code draw the same
    numbers; and a loom graph's linear layers may take their ReLU (forward
    and backward) into the GEMM (``epilogue.py``, with
    ``config.gemm_epilogues`` on). Inductor reads both settings
    as globals, so they are set for the graphs with loom inputs only,
    through compile_fx's own config patches (which also cover the backward,
    compiled later): CPU and other graphs keep Inductor's random lowering
    and passes."""
    import torch._inductor.compile_fx as compile_fx_module

    original = compile_fx_module.compile_fx
    if getattr(original, "_loom", False):
        return

    def compile_fx(model_, example_inputs_, *args, **kwargs):
        # compile_fx calls itself (through this wrapper) inside its patches.
        if _graph_on_loom(model_, example_inputs_):
            patches = kwargs.get("config_patches") or {}
            kwargs["config_patches"] = _loom_patches(patches)
        return original(model_, example_inputs_, *args, **kwargs)

    compile_fx._loom = True
    compile_fx.__wrapped__ = original
    compile_fx_module.compile_fx = compile_fx


def apply() -> None:
    _patch_compile_fx()
    _patch_get_current_backend()
    _patch_scheduler_is_cpu()
    _patch_decide_layout_opt()
