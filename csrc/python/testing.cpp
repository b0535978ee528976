// Hooks for the test suite: a kernel that fails on purpose, to exercise the
// asynchronous error path end to end.
#include <c10/core/DeviceGuard.h>

#include "common.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

int failing_kernel(const loom_kernel_args*, int64_t, int64_t) {
  return LOOM_ERROR_INVALID_ARGUMENT;
}

// The failing kernel by name, as every launch names its kernel: registered
// at the first use (a run-time registration lasts for the process).
const loom_kernel_t* failing() {
  static const loom_kernel_t* const k = [] {
    check(loom_kernel_register("loom_test_fault", failing_kernel), "loom_test_fault");
    return kernel("loom_test_fault");
  }();
  return k;
}

}  // namespace

void init_testing(py::module& m) {
  // Enqueues a kernel named "loom_test_fault" that fails when it runs, on
  // the current stream of `t`'s device; the error surfaces at the next
  // synchronization or enqueue.
  m.def("_enqueue_failing_kernel", [](const at::Tensor& t) {
    c10::DeviceGuard guard(t.device());
    loom_tensor d = describe(t, "loom_test_fault");
    launch("loom_test_fault", failing(), {&d, 1}, {}, 1, 1);
  });
}

}  // namespace torch_loom::python
