// PrivateUse1HooksInterface: what ATen asks of a backend outside any op —
// lazy init, availability, generators, pinned memory, pointer lookup and
// storage resize.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "runtime/allocator.h"
#include "common.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/host_allocator.h"

namespace torch_loom {
namespace {

struct LoomHooks final : public at::PrivateUse1HooksInterface {
  void init() const override {
    check(loom_init(), "loom runtime initialisation");
  }

  bool isBuilt() const override { return true; }

  bool isAvailable() const override { return device_count() > 0; }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return device >= 0 && device < device_count();
  }

  c10::DeviceIndex deviceCount() const override { return device_count(); }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= device_count()) return current_device();
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device) const override {
    return default_generator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    if (device < 0) device = current_device();
    check_device_index(device, "torch.Generator");
    return at::make_generator<LoomGenerator>(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    int device = loom_pointer_device(data);
    TORCH_CHECK(device >= 0, "pointer ", data,
                " is not inside a live loom device allocation");
    return loom_device(static_cast<c10::DeviceIndex>(device));
  }

  bool isPinnedPtr(const void* data) const override {
    return data != nullptr && loom_host_is_pinned(data) != 0;
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return host_allocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

// Registered at load time: ATen consults the hooks as soon as a loom device
// string is parsed.
const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new LoomHooks());
  return true;
}();

}  // namespace
}  // namespace torch_loom
