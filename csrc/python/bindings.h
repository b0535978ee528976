// The Python module torch_loom._C is assembled from one init function per
// concept, each in its own file.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_loom::python {

void init_device(pybind11::module& m);
void init_autograd(pybind11::module& m);
void init_random(pybind11::module& m);
void init_fallback(pybind11::module& m);
void init_memory(pybind11::module& m);
void init_testing(pybind11::module& m);
void init_inductor(pybind11::module& m);
void init_jit(pybind11::module& m);
void init_kernels(pybind11::module& m);
void init_profiler(pybind11::module& m);
void init_distributed(pybind11::module& m);
void init_graph(pybind11::module& m);
void init_fusion(pybind11::module& m);
void init_tile(pybind11::module& m);
void init_queue(pybind11::module& m);

}  // namespace torch_loom::python
