// Launching a kernel of the registry by name from Python, on the current
// stream of its tensors' device: how kernels compiled at run time
// (torch_loom.compiler.jit) and tools reach the runtime. Glue only.
#include <string>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "common.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

// A Python int or bool is an integer argument, a float a double one.
loom_scalar to_scalar(py::handle h, const char* op, size_t index) {
  if (py::isinstance<py::bool_>(h) || py::isinstance<py::int_>(h)) return scalar_i(h.cast<int64_t>());
  if (py::isinstance<py::float_>(h)) return scalar_f(h.cast<double>());
  TORCH_CHECK_TYPE(false, op, ": scalar ", index, " must be an int, float or bool, not ",
                   std::string(py::str(py::type::of(h).attr("__name__"))));
}

void launch_kernel(const std::string& name, const std::vector<at::Tensor>& tensors,
                   const py::list& scalars, int64_t range, int64_t grain) {
  const loom_kernel_t* k = kernel(name.c_str());
  const char* op = loom_kernel_name(k);  // static: errors may name it later
  TORCH_CHECK_VALUE(range >= 0, op, ": range must be >= 0, got ", range);
  TORCH_CHECK_VALUE(grain >= 1, op, ": grain must be >= 1, got ", grain);
  std::vector<loom_scalar> args;
  for (size_t i = 0; i < scalars.size(); ++i) args.push_back(to_scalar(scalars[i], op, i));
  std::vector<loom_tensor> descs;
  c10::OptionalDeviceGuard guard;
  for (const auto& t : tensors) {
    descs.push_back(describe(t, op));
    TORCH_CHECK(t.device() == tensors[0].device(), op, ": all tensors must be on one device, got ",
                tensors[0].device(), " and ", t.device());
  }
  if (!tensors.empty()) guard.reset_device(tensors[0].device());
  launch(op, k, descs, args, range, grain);
}

}  // namespace

void init_kernels(py::module& m) {
  // Enqueues the kernel `name` over [0, range) in chunks of `grain` on the
  // current stream of the tensors' device, with their descriptors and the
  // scalars (int/bool -> .i, float -> .f) as kernel_abi.h arguments.
  m.def("_launch_kernel", &launch_kernel, py::arg("name"), py::arg("tensors"),
        py::arg("scalars"), py::arg("range"), py::arg("grain"));
}

}  // namespace torch_loom::python
