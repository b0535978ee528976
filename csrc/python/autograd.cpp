// A clean interpreter exit after backward passes on loom.
//
// Autograd runs a loom graph on its own device thread. When a backward ends,
// that thread may still drop the graph's last reference a moment after the
// caller has returned, and dropping the returned gradients' Python objects
// takes the GIL. If the interpreter is finalizing by then, Python ends the
// thread from inside a destructor and the process aborts. At exit, while
// Python still runs, _drain_autograd passes one more backward through each
// used device's thread with the GIL released: the thread finishes what it
// was doing, GIL included, before it takes the new graph, whose own
// references hold no Python objects.
#include <torch/csrc/autograd/autograd.h>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_autograd(py::module& m) {
  m.def("_drain_autograd", [] {
    py::gil_scoped_release no_gil;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      if (!device_used(d)) continue;
      at::Tensor x = at::ones({1}, at::TensorOptions().device(loom_device(d)))
                         .requires_grad_(true);
      torch::autograd::grad({(x * 2).sum()}, {x});
    }
  });
}

}  // namespace torch_loom::python
