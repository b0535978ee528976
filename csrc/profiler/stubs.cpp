// The legacy profiler's device hooks (`torch.autograd.profiler.profile(
// use_device="loom")`): each operator records a timing event on the
// current stream as it starts and ends, and its device time is the time
// between them.
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "common.h"
#include "runtime/device.h"

namespace torch_loom::profiler {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct LoomStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device) *device = index;
    loom_event_t* e = nullptr;
    check(loom_event_create(index, LOOM_EVENT_TIMING, &e), "profiler event");
    *event = std::shared_ptr<loom_event_t>(e, loom_event_release);
    if (cpu_ns) *cpu_ns = c10::getTime();
    check(loom_event_record(e, current_stream(index)), "profiler event");
  }

  // Microseconds between two recorded events, once both completed.
  float elapsed(const ProfilerVoidEventStub* first,
                const ProfilerVoidEventStub* second) const override {
    if (!first || !*first || !second || !*second) return 0.f;
    auto* a = static_cast<loom_event_t*>(first->get());
    auto* b = static_cast<loom_event_t*>(second->get());
    check(loom_event_synchronize(a), "profiler event");
    check(loom_event_synchronize(b), "profiler event");
    double ms = 0;
    check(loom_event_elapsed_ms(a, b, &ms), "profiler event");
    return static_cast<float>(ms * 1000.0);
  }

  // loom has no annotation ranges of its own: the Kineto plugin's
  // records carry the operator's correlation id instead.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(loom_device(0));
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      guard.set_index(d);
      op(d);
    }
  }

  void synchronize() const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      check(loom_device_synchronize(d), "profiler synchronize");
  }
};

struct Register {
  Register() {
    static LoomStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace
}  // namespace torch_loom::profiler
