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

  // The maker of the Gloo groups loomccl runs between hosts: a Python
  // callable (store, rank, size, timeout) -> Backend, kept for the
  // process's life.
  d.def("_set_gloo_factory", [](py::function fn) {
    py::handle maker = fn.release();  // owned from here on, never released
    distributed::set_gloo_factory([maker](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout) {
      py::gil_scoped_acquire gil;
      return maker(store, rank, size, timeout).cast<c10::intrusive_ptr<c10d::Backend>>();
    });
  });
  d.def("_topology", [](const c10::intrusive_ptr<ProcessGroupLoom>& pg) {
    const auto& t = pg->topology();
    return py::make_tuple(t.host_of, t.host, t.local_rank, t.local_size);
  });

  // torch.multiprocessing's loom reductions (python/torch_loom/distributed/sharing.py).
  d.def("share_storage", &distributed::share_storage, py::arg("tensor"),
        py::call_guard<py::gil_scoped_release>());
  d.def("open_shared_storage", &distributed::open_shared_storage, py::arg("fd"),
        py::arg("nbytes"), py::arg("device"), py::arg("used") = -1);
  d.def("is_shared_storage", &distributed::is_shared_storage, py::arg("tensor"));
  d.def("sharing_counts", &distributed::sharing_counts);
}

}  // namespace torch_loom::python
