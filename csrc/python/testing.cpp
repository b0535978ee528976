// Hooks for the test suite: a kernel that fails on purpose, to exercise the
// asynchronous error path end to end, and a hold that keeps a stream busy
// until released, for states that exist only while work is pending.
#include <c10/core/DeviceGuard.h>

#include <condition_variable>
#include <mutex>

#include "common.h"
#include "runtime/stream.h"
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

std::mutex g_hold_mutex;
std::condition_variable g_hold_released;
bool g_holding = false;

void hold(void*) {
  std::unique_lock<std::mutex> lock(g_hold_mutex);
  g_hold_released.wait(lock, [] { return !g_holding; });
}

}  // namespace

void init_testing(py::module& m) {
  // Enqueues on `stream` a host callback that waits for
  // _release_held_streams: the stream's later work stays pending until
  // then. Synchronizing the stream before the release never returns.
  m.def("_hold_stream", [](const c10::Stream& stream) {
    {
      std::lock_guard<std::mutex> lock(g_hold_mutex);
      g_holding = true;
    }
    check(loom_host_callback(native_stream(stream), hold, nullptr, "loom_test_hold"),
          "_hold_stream");
  });
  m.def("_release_held_streams", [] {
    {
      std::lock_guard<std::mutex> lock(g_hold_mutex);
      g_holding = false;
    }
    g_hold_released.notify_all();
  });
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
