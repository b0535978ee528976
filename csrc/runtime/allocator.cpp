// Device memory for tensors. Blocks come from the runtime's caching
// allocator on the current stream of the current device; the runtime keeps
// the statistics, so this file only translates, and tells the memory
// history (memory_history.h) and the profiler (profile_memory=True) what
// it allocates and frees while they listen.
#include "runtime/allocator.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "common.h"
#include "runtime/device.h"
#include "runtime/memory_history.h"
#include "runtime/stream.h"

namespace torch_loom {
namespace {

// The profiler's memory events: `delta` bytes at `ptr`, with the device's
// totals after the change.
void report_to_profiler(void* ptr, int64_t delta, int device) {
  loom_memory_stats s{};
  if (loom_memory_stats_get(device, &s) != LOOM_OK) return;
  c10::reportMemoryUsageToProfiler(
      ptr, delta, static_cast<size_t>(s.allocated_bytes[LOOM_POOL_ALL].current),
      static_cast<size_t>(s.reserved_bytes[LOOM_POOL_ALL].current),
      loom_device(static_cast<c10::DeviceIndex>(device)));
}

// free_block while the history or the profiler listens.
void free_observed(void* ptr) noexcept {
  int device = -1;
  uint64_t stream_id = 0;
  loom_memory_block_info block{};
  if (loom_memory_block_query(ptr, &device, &stream_id, &block) != LOOM_OK) {
    (void)loom_free(ptr);
    return;
  }
  bool freed = false;
  try {
    if (memory_history_enabled()) {
      // The free's stack also goes with what the runtime reports during it.
      MemoryHistoryContext context(HistoryContext::kAll);
      memory_history_record_free(device, ptr, block.requested_size, stream_id, context);
      freed = true;
      (void)loom_free(ptr);
    }
  } catch (...) {
  }
  if (!freed) (void)loom_free(ptr);
  try {
    if (c10::memoryProfilingEnabled())
      report_to_profiler(ptr, -static_cast<int64_t>(block.size), device);
  } catch (...) {
  }
}

void free_block(void* ptr) {
  // A deleter cannot throw; loom_free only fails for a pointer it never
  // handed out, which would be a bug caught by the C tests.
  if (C10_UNLIKELY(memory_history_enabled() || c10::memoryProfilingEnabled())) {
    free_observed(ptr);
    return;
  }
  (void)loom_free(ptr);
}

loom_status malloc_recorded(int device, size_t nbytes, loom_stream_t* stream, void** ptr) {
  MemoryHistoryContext context(HistoryContext::kState);
  loom_status st = loom_malloc(device, nbytes, stream, ptr);
  if (st == LOOM_OK)
    memory_history_record_alloc(device, *ptr, nbytes, loom_stream_id(stream), context);
  return st;
}

void copy_stat(c10::CachingAllocator::Stat& to, const loom_stat& from) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_stats(c10::CachingAllocator::StatArray& to,
                const loom_stat (&from)[LOOM_POOL_COUNT]) {
  for (int i = 0; i < LOOM_POOL_COUNT; ++i) copy_stat(to[i], from[i]);
}

std::atomic<bool> g_used[kMaxDevices];

struct LoomDeviceAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    check_device_index(device, "allocate");
    if (!g_used[device].load(std::memory_order_relaxed))
      g_used[device].store(true, std::memory_order_relaxed);
    void* ptr = nullptr;
    if (nbytes > 0) {
      loom_stream_t* stream = current_stream(device);
      loom_status st = C10_UNLIKELY(memory_history_enabled())
                           ? malloc_recorded(device, nbytes, stream, &ptr)
                           : loom_malloc(device, nbytes, stream, &ptr);
      if (st != LOOM_OK) {
        std::string what = "allocating " + std::to_string(nbytes) + " bytes";
        raise_status(st, what.c_str());
      }
      if (C10_UNLIKELY(c10::memoryProfilingEnabled())) {
        int owner = -1;
        uint64_t stream_id = 0;
        loom_memory_block_info block{};
        if (loom_memory_block_query(ptr, &owner, &stream_id, &block) == LOOM_OK)
          report_to_profiler(ptr, static_cast<int64_t>(block.size), owner);
      }
    }
    return {ptr, ptr, &free_block, loom_device(device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count == 0) return;
    // In the stream order of the device that owns the destination, which
    // need not be the current one.
    int device = loom_pointer_device(dst);
    loom_stream_t* stream =
        current_stream(device >= 0 ? static_cast<c10::DeviceIndex>(device) : -1);
    check(loom_memcpy(stream, dst, src, count), "copy_data");
  }

  bool initialized() override { return device_count() > 0; }

  void emptyCache(c10::MempoolId_t) override {
    // Segments returned now are recorded with this stack.
    std::optional<MemoryHistoryContext> context;
    if (memory_history_enabled()) context.emplace(HistoryContext::kAll);
    for (c10::DeviceIndex d = 0; d < device_count(); ++d)
      check(loom_memory_empty_cache(d), "empty_cache");
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    record_stream(ptr, stream);
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override {
    if (device < 0) device = current_device();
    check_device_index(device, "memory_stats");
    loom_memory_stats s{};
    check(loom_memory_stats_get(device, &s), "memory_stats");
    c10::CachingDeviceAllocator::DeviceStats out;
    copy_stats(out.allocation, s.allocation);
    copy_stats(out.segment, s.segment);
    copy_stats(out.active, s.active);
    copy_stats(out.inactive_split, s.inactive_split);
    copy_stats(out.allocated_bytes, s.allocated_bytes);
    copy_stats(out.reserved_bytes, s.reserved_bytes);
    copy_stats(out.active_bytes, s.active_bytes);
    copy_stats(out.inactive_split_bytes, s.inactive_split_bytes);
    copy_stats(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    copy_stat(out.oversize_allocations, s.oversize_allocations);
    copy_stat(out.oversize_segments, s.oversize_segments);
    out.num_sync_all_streams = s.num_sync_all_streams;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    out.max_split_size = s.max_split_size;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (device < 0) device = current_device();
    check_device_index(device, "reset_accumulated_memory_stats");
    check(loom_memory_reset_accumulated(device),
          "reset_accumulated_memory_stats");
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    if (device < 0) device = current_device();
    check_device_index(device, "reset_peak_memory_stats");
    check(loom_memory_reset_peak(device), "reset_peak_memory_stats");
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    if (device < 0) device = current_device();
    check_device_index(device, "get_memory_info");
    size_t free_bytes = 0, total = 0;
    check(loom_memory_info(device, &free_bytes, &total), "get_memory_info");
    return {free_bytes, total};
  }
};

LoomDeviceAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

c10::DeviceAllocator* device_allocator() { return &g_allocator; }

bool device_used(c10::DeviceIndex device) {
  return device >= 0 && device < kMaxDevices && g_used[device].load(std::memory_order_relaxed);
}

void record_stream(const c10::DataPtr& data, const c10::Stream& stream) {
  // As CUDA's allocator: memory it did not hand out (a storage shared
  // between processes, from_blob) has no block to record the stream on.
  if (!data.get() || data.get_deleter() != &free_block) return;
  check(loom_record_stream(data.get(), native_stream(stream)),
        "record_stream");
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(),
              "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());
  c10::Allocator* alloc = storage.allocator();
  if (!alloc) alloc = &g_allocator;
  c10::DataPtr fresh = nbytes > 0
                           ? alloc->allocate(nbytes)
                           : c10::DataPtr(nullptr, storage.device());
  size_t keep = std::min(storage.nbytes(), nbytes);
  if (keep > 0 && storage.data() != nullptr) {
    check(loom_memcpy(current_stream(), fresh.get(), storage.data(), keep),
          "resize_");
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

}  // namespace torch_loom
