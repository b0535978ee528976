// DeviceGuardImplInterface for loom: current device, streams, events and
// device capability, as every c10::DeviceGuard, torch.Stream, torch.Event
// and torch.accelerator call reaches them.
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/allocator.h"
#include "common.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace torch_loom {
namespace {

loom_event_t* as_event(void* e) { return static_cast<loom_event_t*>(e); }

struct LoomGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  LoomGuardImpl() = default;
  explicit LoomGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == kType, "LoomGuardImpl built for ", t);
  }

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected a loom device but got ", d);
    return loom_device(exchange_device(d.index()));
  }

  c10::Device getDevice() const override {
    return loom_device(current_device());
  }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected a loom device but got ", d);
    set_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_device(d.index());
    } catch (...) {
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return get_current_stream(d.index());
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return default_stream(d.index());
  }

  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    return stream_from_pool(d.index() < 0 ? current_device() : d.index(),
                            priority);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d,
                                      bool high_priority = false) const override {
    return stream_from_pool(d.index() < 0 ? current_device() : d.index(),
                            high_priority ? -1 : 0);
  }

  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return exchange_current_stream(s);
  }

  void* getStreamNativeHandle(const c10::Stream s) const override {
    return native_stream(s);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    auto& t = cap.capability_data.supported_scalar_types;
    t.has_Float = t.has_Double = t.has_Half = t.has_BFloat16 = 1;
    t.has_Char = t.has_Short = t.has_Int = t.has_Long = t.has_Byte = 1;
    t.has_Bool = t.has_ComplexFloat = t.has_ComplexDouble = 1;
    return cap;
  }

  // ---- events: void* is a loom_event_t*, created at the first record ----

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) loom_event_release(as_event(event));
  }

  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    loom_stream_t* s = native_stream(stream);
    if (!*event) {
      unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT
                           ? LOOM_EVENT_TIMING
                           : LOOM_EVENT_DEFAULT;
      loom_event_t* e = nullptr;
      check(loom_event_create(stream.device_index(), flags, &e),
            "Event.record");
      *event = e;
    }
    check(loom_event_record(as_event(*event), s), "Event.record");
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    check(loom_stream_wait_event(native_stream(stream), as_event(event)),
          "Event.wait");
  }

  bool queryEvent(void* event) const override {
    if (!event) return true;
    loom_status st = loom_event_query(as_event(event));
    if (st == LOOM_ERROR_NOT_READY) return false;
    check(st, "Event.query");
    return true;
  }

  void synchronizeEvent(void* event) const override {
    if (!event) return;
    check(loom_event_synchronize(as_event(event)), "Event.synchronize");
  }

  double elapsedTime(void* start, void* end,
                     const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed "
                "time.");
    double ms = 0;
    check(loom_event_elapsed_ms(as_event(start), as_event(end), &ms),
          "Event.elapsed_time");
    return ms;
  }

  // ---- streams -------------------------------------------------------------

  bool queryStream(const c10::Stream& stream) const override {
    loom_status st = loom_stream_query(native_stream(stream));
    if (st == LOOM_ERROR_NOT_READY) return false;
    check(st, "Stream.query");
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    check(loom_stream_synchronize(native_stream(stream)),
          "Stream.synchronize");
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    c10::DeviceIndex d = device_index < 0 ? current_device() : device_index;
    check_device_index(d, "synchronize");
    check(loom_device_synchronize(d), "synchronize");
  }

  void recordDataPtrOnStream(const c10::DataPtr& data,
                             const c10::Stream& stream) const override {
    record_stream(data, stream);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, LoomGuardImpl);

}  // namespace torch_loom
