#include "python/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native part of torch_loom: the loom device binding.";
  torch_loom::python::init_device(m);
  torch_loom::python::init_autograd(m);
  torch_loom::python::init_random(m);
  torch_loom::python::init_fallback(m);
  torch_loom::python::init_memory(m);
  torch_loom::python::init_testing(m);
  torch_loom::python::init_inductor(m);
  torch_loom::python::init_jit(m);
  torch_loom::python::init_kernels(m);
  torch_loom::python::init_profiler(m);
  torch_loom::python::init_distributed(m);
  torch_loom::python::init_graph(m);
  torch_loom::python::init_fusion(m);
  torch_loom::python::init_tile(m);
  torch_loom::python::init_queue(m);
}
