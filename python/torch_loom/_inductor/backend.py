"""Inductor's backend for loom: generated C++ kernels launched on loom's
stream, extern kernels (matmul, convolution, attention) as loom ops.

Registered when Inductor loads (see __init__.py). The host driver's device
memory is host memory, so Inductor's C++ kernel generator runs on loom
buffers; cpp_kernels.py turns its kernels into loom kernels launched on the
current stream, and this module adds the wrapper that calls them, the device
op overrides the wrapper is written with, and the configuration that keeps
random ops on loom's Philox generator. Where the host cannot address device
memory, compiled graphs run their nodes as loom ops instead.
"""

from __future__ import annotations

import logging
from textwrap import dedent

import torch
from torch._inductor import config as inductor_config
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
from torch._inductor.virtualized import V

from . import batchnorm, interface, library_ops, patches
from .cpp_kernels import LoomCppScheduling

log = logging.getLogger("torch_loom.inductor")


class LoomDeviceOpOverrides(DeviceOpOverrides):
    """The lines the Python wrapper uses for device, stream and guard."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return dedent(f"""
            def {name}(index):
                return torch.loom.current_stream(index).stream_id
            """)

    def set_device(self, device_idx: int) -> str:
        return f"torch.loom.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.loom.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.loom.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.loom.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


class _LoomWrapperMixin:
    """Calls generated kernels of loom graphs: each launches its loop nests
    on the current loom stream (cpp_kernels.py), in order with the extern
    kernels around it."""

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if triton or device.type != "loom":
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                                        triton=triton, **kwargs)
        if not host_addressable():
            raise NotImplementedError(
                f"torch.compile on loom: {kernel_name} is a C++ kernel, but the host cannot "
                "address this device's memory")
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                        is_pinned=False):
        # Buffers on loom: runtime.empty_strided_loom, as Inductor's
        # empty_strided_cpu/_cuda (the same allocation, without the Python
        # argument parser's keywords: a few µs a buffer, dozens per graph).
        if (device.type != "loom" or is_pinned
                or inductor_config.test_configs.track_memory_lifecycle):
            return super().make_allocation(name, device, dtype, shape, stride,
                                           allocation_shape=allocation_shape, is_pinned=is_pinned)
        if allocation_shape is None:
            allocation_shape = shape
        shape_tuple = self.codegen_python_shape_tuple(shape)
        allocation_tuple = self.codegen_python_shape_tuple(allocation_shape)
        stride_tuple = self.codegen_python_shape_tuple(stride)
        out = f"{name} = empty_strided_loom({allocation_tuple}, {stride_tuple}, {dtype})"
        if shape_tuple != allocation_tuple:
            out += f".as_strided({shape_tuple}, {stride_tuple})"
        return out


class LoomWrapperCodegen(_LoomWrapperMixin, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return LoomSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return LoomWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.splice(
            "from torch_loom._inductor.runtime import empty_strided_loom, loom_cpp_kernel")


class LoomSubgraphWrapperCodegen(_LoomWrapperMixin, SubgraphPythonWrapperCodegen):
    pass


class LoomCppWrapperCodegen:
    """Inductor's C++ wrapper (cpp_wrapper, AOTInductor) is not supported on
    loom; Inductor only asks for it when one of those is enabled."""

    @staticmethod
    def create(*args, **kwargs):
        raise NotImplementedError(
            "torch.compile on loom: cpp_wrapper and AOTInductor are not supported; "
            "leave torch._inductor.config.cpp_wrapper off for loom graphs")


Scheduling = LoomCppScheduling

# What init_backend_registration reads as torch.loom.<name>.
INDUCTOR_CLASSES = {
    "Scheduling": Scheduling,
    "PythonWrapperCodegen": LoomWrapperCodegen,
    "CppWrapperCodegen": LoomCppWrapperCodegen,
    "WrapperFxCodegen": WrapperFxCodegen,
}


def host_addressable() -> bool:
    """Whether the host may run code on loom's device memory (the host
    driver: yes; the guarded driver, a discrete device: no)."""
    from .interface import LoomInterface

    return LoomInterface.Worker.get_device_properties(0).host_addressable


def _register() -> None:
    interface.register(with_indices=True)
    register_device_op_overrides("loom", LoomDeviceOpOverrides())
    from . import config

    register_backend_for_device("loom", *INDUCTOR_CLASSES.values(), device_custom_config=config)
    patches.apply()
    library_ops.apply()
    batchnorm.register_fakes()
    if not host_addressable():
        # Inductor's kernels are host code: where the host cannot address
        # device memory, every node runs as the loom op it came from.
        inductor_config.fallback_by_default = True
        log.warning("torch.compile on loom: the %s driver's memory is not host-addressable; "
                    "Inductor's C++ kernels are off and compiled graphs run their nodes as loom ops",
                    interface.LoomInterface.Worker.get_device_properties(0).name)


_register()
