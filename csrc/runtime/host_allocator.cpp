// Pinned blocks handed to PyTorch. A block freed while an asynchronous copy
// still reads or writes it is parked with the events of those copies and
// returned to the runtime once they have completed.
#include "runtime/host_allocator.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "runtime/stream.h"

namespace torch_loom {
namespace {

struct Pending {
  void* block;
  std::vector<loom_event_t*> events;
};

std::mutex g_mutex;
// Blocks in use with the events recorded on them, and freed blocks waiting
// for their events. Leaked so that late frees at exit stay valid.
auto& g_in_use = *new std::unordered_map<void*, std::vector<loom_event_t*>>();
auto& g_parked = *new std::vector<Pending>();

bool all_done(const std::vector<loom_event_t*>& events, bool wait) {
  for (loom_event_t* e : events) {
    if (wait) {
      (void)loom_event_synchronize(e);
    } else if (loom_event_query(e) == LOOM_ERROR_NOT_READY) {
      return false;
    }
  }
  return true;
}

// Frees parked blocks whose copies are done (all of them when `wait`).
// Caller holds g_mutex.
void reclaim(bool wait) {
  auto it = g_parked.begin();
  while (it != g_parked.end()) {
    if (!all_done(it->events, wait)) {
      ++it;
      continue;
    }
    for (loom_event_t* e : it->events) loom_event_release(e);
    (void)loom_host_free(it->block);
    it = g_parked.erase(it);
  }
}

void free_pinned(void* block) {
  if (!block) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_in_use.find(block);
  if (found == g_in_use.end()) {
    (void)loom_host_free(block);
    return;
  }
  std::vector<loom_event_t*> events = std::move(found->second);
  g_in_use.erase(found);
  if (all_done(events, false)) {
    for (loom_event_t* e : events) loom_event_release(e);
    (void)loom_host_free(block);
  } else {
    g_parked.push_back({block, std::move(events)});
  }
}

void copy_stat(c10::CachingAllocator::Stat& to, const loom_stat& from) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

struct LoomHostAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      reclaim(false);
    }
    void* ptr = nullptr;
    if (nbytes > 0) check(loom_host_malloc(nbytes, &ptr), "pin_memory");
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    void* block = ctx ? ctx : loom_host_block_base(ptr);
    if (!block) return false;
    loom_event_t* event = nullptr;
    check(loom_event_create(stream.device_index(), LOOM_EVENT_DEFAULT, &event),
          "record_event");
    loom_status st = loom_event_record(event, native_stream(stream));
    if (st != LOOM_OK) {
      loom_event_release(event);
      raise_status(st, "record_event");
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    // A long-lived staging buffer collects one event per copy: drop those
    // whose copies are done.
    std::vector<loom_event_t*>& events = g_in_use[block];
    auto done = std::remove_if(events.begin(), events.end(), [](loom_event_t* e) {
      if (loom_event_query(e) == LOOM_ERROR_NOT_READY) return false;
      loom_event_release(e);
      return true;
    });
    events.erase(done, events.end());
    events.push_back(event);
    return true;
  }

  void empty_cache() override {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      reclaim(true);
    }
    check(loom_host_empty_cache(), "empty_host_cache");
  }

  at::HostStats get_stats() override {
    loom_host_stats s{};
    check(loom_host_stats_get(&s), "host_memory_stats");
    at::HostStats out;
    copy_stat(out.active_requests, s.allocation);
    copy_stat(out.active_bytes, s.allocated_bytes);
    copy_stat(out.allocations, s.segment);
    copy_stat(out.allocated_bytes, s.reserved_bytes);
    out.num_host_alloc = s.num_host_alloc;
    out.num_host_free = s.num_host_free;
    return out;
  }

  void reset_accumulated_stats() override {
    check(loom_host_reset_accumulated(), "reset_accumulated_host_memory_stats");
  }

  void reset_peak_stats() override {
    check(loom_host_reset_peak(), "reset_peak_host_memory_stats");
  }
};

LoomHostAllocator g_host_allocator;

}  // namespace

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator);

at::HostAllocator* host_allocator() { return &g_host_allocator; }

bool is_pinned_storage(const c10::Storage& storage) {
  return storage.data_ptr().get_deleter() == &free_pinned;
}

void record_host_use(const c10::Storage& storage, const c10::Stream& stream) {
  const c10::DataPtr& data = storage.data_ptr();
  g_host_allocator.record_event(data.get(), data.get_context(), stream);
}

}  // namespace torch_loom
