// torch_loom._C._distributed: the loomccl process group for
// python/torch_loom/distributed (which registers it with torch.distributed).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include "distributed/process_group_loom.h"
#include "distributed/shared_storage.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_distributed(py::module& m) {
  using distributed::LoomOptions;
  using distributed::ProcessGroupLoom;
  auto d = m.def_submodule("_distributed", "loomccl, the c10d backend of loom tensors");

  // Options as torch.distributed hands them around: split_group deep-copies
  // the parent's.
  py::class_<LoomOptions, c10d::Backend::Options, c10::intrusive_ptr<LoomOptions>>(d, "Options")
      .def(py::init([](std::chrono::milliseconds timeout) {
             return c10::make_intrusive<LoomOptions>(timeout);
           }),
           py::arg("timeout") = kBackendDefaultTimeout)
      .def_readwrite("buffer_bytes", &LoomOptions::buffer_bytes)
      .def("__copy__", [](const LoomOptions& o) { return c10::make_intrusive<LoomOptions>(o); })
      .def("__deepcopy__", [](const LoomOptions& o, py::dict) {
        return c10::make_intrusive<LoomOptions>(o);
      });

  py::class_<ProcessGroupLoom, c10d::Backend, c10::intrusive_ptr<ProcessGroupLoom>>(
      d, "ProcessGroupLoom")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       c10::intrusive_ptr<LoomOptions> options) {
             return c10::make_intrusive<ProcessGroupLoom>(store, rank, size, std::move(options));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("options"),
           py::call_guard<py::gil_scoped_release>())
      // What split_group copies for the child groups.
      .def_property_readonly("options", &ProcessGroupLoom::getBackendOptions);

  // torch.multiprocessing's loom reductions (python/torch_loom/distributed/sharing.py).
  d.def("share_storage", &distributed::share_storage, py::arg("tensor"),
        py::call_guard<py::gil_scoped_release>());
  d.def("open_shared_storage", &distributed::open_shared_storage, py::arg("fd"),
        py::arg("nbytes"), py::arg("device"));
  d.def("is_shared_storage", &distributed::is_shared_storage, py::arg("tensor"));
}

}  // namespace torch_loom::python
