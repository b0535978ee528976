// The default generators of the loom devices, as torch.Generator objects.
#include <ATen/Context.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include "runtime/device.h"
#include "runtime/generator.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_random(py::module& m) {
  m.def("_get_default_generator", [](int index) {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    const at::Generator& gen =
        default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(gen));
  });
}

}  // namespace torch_loom::python
