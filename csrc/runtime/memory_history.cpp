// The memory history (see memory_history.h).
//
// Locks: the history's mutex is a leaf. The runtime calls the observer
// with an allocator lock held, and the observer takes the mutex; so nothing
// here calls the runtime while holding the mutex. Stacks are gathered
// (which takes the GIL) before any lock, and a dropped stack never needs
// the GIL (PyTorch defers the release of its Python frames).
#include "runtime/memory_history.h"

#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <chrono>
#include <mutex>
#include <unordered_map>

#include "common.h"
#include "runtime/device.h"

namespace torch_loom {
namespace detail {
std::atomic<int> g_history_level{0};
}  // namespace detail

namespace {

using Context = std::shared_ptr<c10::GatheredContext>;

// What gathering needs, readable without the mutex.
std::atomic<int> g_context{0};
std::atomic<bool> g_cpp_frames{false};

thread_local const MemoryHistoryContext* tls_context = nullptr;

struct Ring {
  std::vector<HistoryEntry> entries;
  size_t next = 0;  // the oldest entry once full
};

struct State {
  std::mutex mutex;
  HistoryLevel level = HistoryLevel::kOff;
  HistoryContext context = HistoryContext::kNone;
  size_t max_entries = SIZE_MAX;
  uint32_t skip = 0;  // bits of HistoryAction
  std::vector<Ring> rings;  // per device
  std::unordered_map<uintptr_t, Context> blocks, segments;

  void clear_traces() { rings.assign(rings.size(), Ring{}); }
  void clear() {
    clear_traces();
    blocks.clear();
    segments.clear();
  }
};

// Leaked: frees reach it from other threads and static destructors.
State& state() {
  static State* s = new State;
  return *s;
}

int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// Appends to the device's ring; with the mutex held.
void push(State& s, HistoryAction action, int device, uintptr_t addr, size_t size,
          uint64_t stream_id, Context context) {
  if (s.level != HistoryLevel::kAll || (s.skip >> static_cast<int>(action)) & 1u) return;
  if (s.max_entries == 0 || device < 0 || device >= kMaxDevices) return;
  if (static_cast<size_t>(device) >= s.rings.size()) s.rings.resize(device + 1);
  Ring& r = s.rings[device];
  HistoryEntry e{action, device, addr, size, stream_id, now_us(), std::move(context)};
  if (r.entries.size() < s.max_entries) {
    r.entries.push_back(std::move(e));
  } else {
    r.entries[r.next] = std::move(e);
    r.next = (r.next + 1) % s.max_entries;
  }
}

// The stack an event gets when the history keeps stacks for `need`.
Context stack_for(const State& s, HistoryContext need, const Context& context) {
  return s.context >= need ? context : nullptr;
}

void on_event(void*, const loom_memory_event* e) {
  State& s = state();
  const Context context = tls_context ? tls_context->get() : Context();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.level == HistoryLevel::kOff) return;
  switch (e->kind) {
    case LOOM_MEMORY_EVENT_SEGMENT_ALLOC:
      if (context && s.context >= HistoryContext::kState) s.segments[e->address] = context;
      push(s, HistoryAction::kSegmentAlloc, e->device, e->address, e->size, e->stream_id,
           stack_for(s, HistoryContext::kAlloc, context));
      break;
    case LOOM_MEMORY_EVENT_SEGMENT_FREE:
      s.segments.erase(e->address);
      push(s, HistoryAction::kSegmentFree, e->device, e->address, e->size, e->stream_id,
           stack_for(s, HistoryContext::kAll, context));
      break;
    case LOOM_MEMORY_EVENT_FREE_COMPLETED:
      s.blocks.erase(e->address);
      push(s, HistoryAction::kFreeCompleted, e->device, e->address, e->requested_size,
           e->stream_id, stack_for(s, HistoryContext::kAll, context));
      break;
    case LOOM_MEMORY_EVENT_OOM:
      push(s, HistoryAction::kOom, e->device, e->device_free, e->size, e->stream_id,
           stack_for(s, HistoryContext::kAlloc, context));
      break;
    default:
      break;
  }
}

const loom_memory_observer g_observer = {&on_event, nullptr};

HistoryLevel parse_enabled(const std::optional<std::string>& v) {
  if (!v) return HistoryLevel::kOff;
  if (*v == "state") return HistoryLevel::kState;
  if (*v == "all") return HistoryLevel::kAll;
  TORCH_CHECK_VALUE(false, "_record_memory_history: enabled must be 'state', 'all' or None, got '",
                    *v, "'");
  return HistoryLevel::kOff;
}

HistoryContext parse_context(const std::optional<std::string>& v) {
  if (!v) return HistoryContext::kNone;
  if (*v == "state") return HistoryContext::kState;
  if (*v == "alloc") return HistoryContext::kAlloc;
  if (*v == "all") return HistoryContext::kAll;
  TORCH_CHECK_VALUE(false,
                    "_record_memory_history: context must be 'state', 'alloc', 'all' or None, "
                    "got '", *v, "'");
  return HistoryContext::kNone;
}

uint32_t parse_skip(const std::vector<std::string>& names) {
  uint32_t bits = 0;
  for (const std::string& name : names) {
    bool known = false;
    for (int a = 0; a < static_cast<int>(HistoryAction::kCount); ++a) {
      if (name == history_action_name(static_cast<HistoryAction>(a))) {
        bits |= 1u << a;
        known = true;
      }
    }
    TORCH_CHECK_VALUE(known, "_record_memory_history: unknown action '", name,
                      "' in skip_actions");
  }
  return bits;
}

}  // namespace

const char* history_action_name(HistoryAction action) {
  switch (action) {
    case HistoryAction::kAlloc: return "alloc";
    case HistoryAction::kFreeRequested: return "free_requested";
    case HistoryAction::kFreeCompleted: return "free_completed";
    case HistoryAction::kSegmentAlloc: return "segment_alloc";
    case HistoryAction::kSegmentFree: return "segment_free";
    case HistoryAction::kOom: return "oom";
    case HistoryAction::kSnapshot: return "snapshot";
    case HistoryAction::kCount: break;
  }
  return "unknown";
}

void memory_history_configure(const std::optional<std::string>& enabled,
                              const std::optional<std::string>& context,
                              const std::string& stacks, size_t max_entries,
                              bool clear_history,
                              const std::vector<std::string>& skip_actions) {
  const HistoryLevel level = parse_enabled(enabled);
  const HistoryContext ctx = level == HistoryLevel::kOff ? HistoryContext::kNone
                                                         : parse_context(context);
  TORCH_CHECK_VALUE(stacks == "python" || stacks == "all",
                    "_record_memory_history: stacks must be 'python' or 'all', got '", stacks,
                    "'");
  const uint32_t skip = parse_skip(skip_actions);
  State& s = state();
  if (level == HistoryLevel::kOff) {
    // Stop the allocator's records first, then the runtime's; once the
    // observer is gone nothing refers to what is cleared.
    detail::g_history_level.store(0, std::memory_order_relaxed);
    check(loom_memory_set_observer(nullptr), "_record_memory_history");
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (level == HistoryLevel::kOff) s.clear();
    else if (clear_history) s.clear_traces();
    s.level = level;
    s.context = ctx;
    s.max_entries = max_entries;
    s.skip = skip;
    for (Ring& r : s.rings) {
      // Oldest first again, keeping the newest `max_entries`.
      const size_t n = r.entries.size();
      std::vector<HistoryEntry> kept;
      for (size_t i = n > max_entries ? n - max_entries : 0; i < n; ++i)
        kept.push_back(std::move(r.entries[(r.next + i) % n]));
      r.entries = std::move(kept);
      r.next = 0;
    }
    g_context.store(static_cast<int>(ctx), std::memory_order_relaxed);
    g_cpp_frames.store(stacks == "all", std::memory_order_relaxed);
  }
  if (level != HistoryLevel::kOff) {
    check(loom_memory_set_observer(&g_observer), "_record_memory_history");
    detail::g_history_level.store(static_cast<int>(level), std::memory_order_relaxed);
  }
}

MemoryHistoryContext::MemoryHistoryContext(HistoryContext need) : previous_(tls_context) {
  if (g_context.load(std::memory_order_relaxed) >= static_cast<int>(need) &&
      need != HistoryContext::kNone)
    context_ = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                                g_cpp_frames.load(std::memory_order_relaxed));
  tls_context = this;
}

MemoryHistoryContext::~MemoryHistoryContext() { tls_context = previous_; }

void memory_history_record_alloc(int device, const void* ptr, size_t requested,
                                 uint64_t stream_id, const MemoryHistoryContext& context) {
  State& s = state();
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.level == HistoryLevel::kOff) return;
  if (context.get() && s.context >= HistoryContext::kState) s.blocks[addr] = context.get();
  push(s, HistoryAction::kAlloc, device, addr, requested, stream_id,
       stack_for(s, HistoryContext::kAlloc, context.get()));
}

void memory_history_record_free(int device, const void* ptr, size_t requested,
                                uint64_t stream_id, const MemoryHistoryContext& context) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.level == HistoryLevel::kOff) return;
  push(s, HistoryAction::kFreeRequested, device, reinterpret_cast<uintptr_t>(ptr), requested,
       stream_id, stack_for(s, HistoryContext::kAll, context.get()));
}

HistoryStacks memory_history_copy(const std::vector<size_t>& active_bytes) {
  State& s = state();
  HistoryStacks out;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (size_t d = 0; d < active_bytes.size(); ++d)
    push(s, HistoryAction::kSnapshot, static_cast<int>(d), 0, active_bytes[d], 0, nullptr);
  out.traces.resize(std::max(s.rings.size(), active_bytes.size()));
  for (size_t d = 0; d < s.rings.size(); ++d) {
    const Ring& r = s.rings[d];
    const size_t n = r.entries.size();
    out.traces[d].reserve(n);
    for (size_t i = 0; i < n; ++i) out.traces[d].push_back(r.entries[(r.next + i) % n]);
  }
  out.blocks.assign(s.blocks.begin(), s.blocks.end());
  out.segments.assign(s.segments.begin(), s.segments.end());
  return out;
}

}  // namespace torch_loom
