// The memory history of the loom device (torch.loom.memory.
// _record_memory_history): a bounded ring of allocator events per device,
// with the stack each was made from, and the stacks of the blocks and
// segments alive now, for the snapshots PyTorch's memory viewer reads.
//
// The allocator (runtime/allocator.cpp) records block allocations and free
// requests, where the caller's stack is at hand; the runtime reports what it
// does on its own (segments obtained and returned, frees completing once
// other streams are done, out-of-memory) through its observer
// (loom_memory_set_observer), and those events take the stack of the
// MemoryHistoryContext alive on the thread that caused them.
//
// Off (the default), the allocator pays one relaxed load per call.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/hal.h"

namespace torch_loom {

// What is recorded: nothing, the stacks of live memory, or also the trace.
enum class HistoryLevel : int { kOff = 0, kState = 1, kAll = 2 };

// Which events get stacks (torch.cuda's `context`): none, live memory only,
// also allocations, also frees.
enum class HistoryContext : int { kNone = 0, kState = 1, kAlloc = 2, kAll = 3 };

enum class HistoryAction : int {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kOom,
  kSnapshot,
  kCount
};

const char* history_action_name(HistoryAction action);

namespace detail {
extern std::atomic<int> g_history_level;
}

// The allocator's check: one relaxed load.
inline bool memory_history_enabled() {
  return detail::g_history_level.load(std::memory_order_relaxed) != 0;
}

// Configures the history as torch.cuda.memory._record_memory_history does:
// `enabled` None/"state"/"all", `context` None/"state"/"alloc"/"all",
// `stacks` "python"/"all" (C++ frames too). Turning it off drops what was
// recorded; `clear_history` drops the traces. Raises on bad values.
void memory_history_configure(const std::optional<std::string>& enabled,
                              const std::optional<std::string>& context,
                              const std::string& stacks, size_t max_entries,
                              bool clear_history,
                              const std::vector<std::string>& skip_actions);

// While alive, gathers the calling thread's stack (when the history keeps
// stacks for `need`) and lends it to the events the runtime reports on this
// thread. Nests.
class MemoryHistoryContext {
 public:
  explicit MemoryHistoryContext(HistoryContext need);
  ~MemoryHistoryContext();
  MemoryHistoryContext(const MemoryHistoryContext&) = delete;
  MemoryHistoryContext& operator=(const MemoryHistoryContext&) = delete;
  const std::shared_ptr<c10::GatheredContext>& get() const { return context_; }

 private:
  std::shared_ptr<c10::GatheredContext> context_;
  const MemoryHistoryContext* previous_;
};

// Block events from the allocator. `stream_id` is loom_stream_id's.
void memory_history_record_alloc(int device, const void* ptr, size_t requested,
                                 uint64_t stream_id,
                                 const MemoryHistoryContext& context);
void memory_history_record_free(int device, const void* ptr, size_t requested,
                                uint64_t stream_id,
                                const MemoryHistoryContext& context);

// What a snapshot shows of the history, copied under its lock.
struct HistoryEntry {
  HistoryAction action;
  int device;
  uintptr_t addr;  // for kOom: the bytes free on the device
  size_t size;
  uint64_t stream_id;
  int64_t time_us;  // microseconds since the Unix epoch
  std::shared_ptr<c10::GatheredContext> context;
};

struct HistoryStacks {
  // Each device's trace, oldest first (empty unless recording "all").
  std::vector<std::vector<HistoryEntry>> traces;
  // Stacks of live blocks and segments by address.
  std::vector<std::pair<uintptr_t, std::shared_ptr<c10::GatheredContext>>> blocks, segments;
};

// Appends a "snapshot" entry (size: the device's active bytes) to each
// device's trace, then copies the history.
HistoryStacks memory_history_copy(const std::vector<size_t>& active_bytes);

}  // namespace torch_loom
