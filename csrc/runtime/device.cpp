#include "runtime/device.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>

#include "loom/hal.h"

namespace torch_loom {
namespace {
// -1 until the thread reads or sets it: then the process's device.
thread_local c10::DeviceIndex tls_current_device = -1;

long env_index(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return end != text && *end == 0 ? v : -1;
}

// The device a thread starts on: under torchrun (LOCAL_WORLD_SIZE and
// LOCAL_RANK set) loom:<LOCAL_RANK>, the device the runtime gives this
// process's threads (base/env.c), as a CUDA DDP script expects; else
// loom:0.
c10::DeviceIndex process_device() {
  static const c10::DeviceIndex index = [] {
    const long world = env_index("LOCAL_WORLD_SIZE"), rank = env_index("LOCAL_RANK");
    if (world > 0 && rank >= 0 && rank < world && rank < device_count())
      return static_cast<c10::DeviceIndex>(rank);
    return c10::DeviceIndex{0};
  }();
  return index;
}
}  // namespace

c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex count = [] {
    int n = loom_device_count();
    return static_cast<c10::DeviceIndex>(std::clamp(n, 0, kMaxDevices));
  }();
  return count;
}

void check_device_index(c10::DeviceIndex index, const char* what) {
  c10::DeviceIndex count = device_count();
  TORCH_CHECK(count > 0, what,
              ": no loom device is available (the loom runtime did not "
              "start: ", loom_last_error(), ")");
  TORCH_CHECK(index >= 0 && index < count, what, ": invalid device loom:",
              static_cast<int>(index), " (there ",
              count == 1 ? "is 1 loom device" : "are ",
              count == 1 ? "" : std::to_string(count) + " loom devices",
              "; set LOOM_NUM_DEVICES for more)");
}

c10::DeviceIndex current_device() {
  if (tls_current_device < 0) tls_current_device = process_device();
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index, "set_device");
  tls_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  c10::DeviceIndex previous = current_device();
  if (index != previous) set_device(index);
  return previous;
}

}  // namespace torch_loom
