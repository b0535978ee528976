#include "runtime/stream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>

#include "common.h"
#include "runtime/device.h"

namespace torch_loom {
namespace {

constexpr int kPriorityClasses = 2;  // normal, high
constexpr int kPoolSlots = kStreamsPerPool * kPriorityClasses;

struct DevicePool {
  std::mutex mutex;
  std::array<std::atomic<loom_stream_t*>, kPoolSlots> streams{};
  std::array<std::atomic<uint32_t>, kPriorityClasses> next{};
};

// Leaked on purpose: streams may be used by static destructors of other
// libraries, after which the runtime owns their teardown.
DevicePool& pool(c10::DeviceIndex device) {
  static DevicePool* pools = new DevicePool[kMaxDevices];
  return pools[device];
}

thread_local std::array<c10::StreamId, kMaxDevices> tls_current{};

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, loom_device(device), id);
}

loom_stream_t* pool_stream(c10::DeviceIndex device, int slot) {
  DevicePool& p = pool(device);
  loom_stream_t* s = p.streams[slot].load(std::memory_order_acquire);
  if (s) return s;
  std::lock_guard<std::mutex> lock(p.mutex);
  s = p.streams[slot].load(std::memory_order_relaxed);
  if (!s) {
    int priority = slot >= kStreamsPerPool ? -1 : 0;
    check(loom_stream_create(device, priority, &s), "loom stream creation");
    p.streams[slot].store(s, std::memory_order_release);
  }
  return s;
}

}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) {
  check_device_index(device, "default_stream");
  return make_stream(device, 0);
}

c10::Stream stream_from_pool(c10::DeviceIndex device, int priority) {
  check_device_index(device, "stream");
  int cls = priority < 0 ? 1 : 0;
  uint32_t k = pool(device).next[cls].fetch_add(1) % kStreamsPerPool;
  int slot = cls * kStreamsPerPool + static_cast<int>(k);
  pool_stream(device, slot);  // create now so errors surface here
  return make_stream(device, slot + 1);
}

c10::Stream get_current_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device, "current_stream");
  return make_stream(device, tls_current[device]);
}

c10::Stream exchange_current_stream(c10::Stream stream) {
  c10::DeviceIndex device = stream.device_index();
  if (device < 0 || device >= kMaxDevices) return stream;  // not a loom stream
  c10::Stream old = make_stream(device, tls_current[device]);
  tls_current[device] = stream.id();
  return old;
}

loom_stream_t* native_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected a loom stream but got one of ", stream.device());
  c10::DeviceIndex device = stream.device_index();
  check_device_index(device, "stream");
  c10::StreamId id = stream.id();
  if (id == 0) {
    loom_stream_t* s = nullptr;
    check(loom_stream_default(device, &s), "default stream");
    return s;
  }
  TORCH_CHECK(id > 0 && id <= kPoolSlots, "invalid loom stream id ", id);
  return pool_stream(device, static_cast<int>(id - 1));
}

int stream_priority(const c10::Stream& stream) {
  return stream.id() > kStreamsPerPool ? -1 : 0;
}

c10::StreamId stream_id_of_native(c10::DeviceIndex device, uint64_t native_id) {
  if (device < 0 || device >= device_count()) return -1;
  loom_stream_t* dflt = nullptr;
  if (loom_stream_default(device, &dflt) == LOOM_OK && loom_stream_id(dflt) == native_id) return 0;
  DevicePool& p = pool(device);
  for (int slot = 0; slot < kPoolSlots; ++slot) {
    loom_stream_t* s = p.streams[slot].load(std::memory_order_acquire);
    if (s && loom_stream_id(s) == native_id) return slot + 1;
  }
  return -1;
}

}  // namespace torch_loom
