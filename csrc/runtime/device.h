// Device indices: how many loom devices there are and which one this thread
// is using (thread-local, like CUDA's current device).
#pragma once

#include <c10/core/Device.h>

namespace torch_loom {

// Devices beyond this many are not exposed (the thread-local tables are
// fixed-size).
constexpr int kMaxDevices = 64;

// Number of devices; 0 when the runtime cannot start. Never throws.
c10::DeviceIndex device_count() noexcept;

// Throws a RuntimeError naming `what` and the device if `index` is not a
// valid loom device index.
void check_device_index(c10::DeviceIndex index, const char* what);

c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
// Sets the current device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);

inline c10::Device loom_device(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

}  // namespace torch_loom
