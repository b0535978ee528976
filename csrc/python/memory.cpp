// torch.loom.memory's history and snapshots: _record_memory_history and
// _memory_snapshot, the dictionary torch.cuda.memory._snapshot() returns
// (segments with their blocks, each device's trace, the allocator's
// settings), with stack frames symbolized as PyTorch does for CUDA.
#include <torch/csrc/profiler/combined_traceback.h>

#include <map>
#include <unordered_map>
#include <optional>
#include <utility>

#include "common.h"
#include "runtime/device.h"
#include "runtime/memory_history.h"
#include "runtime/stream.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

struct Segment {
  loom_memory_segment_info info;
  std::vector<loom_memory_block_info> blocks;
};

int copy_segment(void* user, const loom_memory_segment_info* segment,
                 const loom_memory_block_info* blocks) {
  auto* out = static_cast<std::vector<Segment>*>(user);
  out->push_back({*segment, std::vector<loom_memory_block_info>(blocks, blocks + segment->num_blocks)});
  return 0;
}

const char* block_state(int32_t state) {
  switch (state) {
    case LOOM_BLOCK_ALLOCATED: return "active_allocated";
    case LOOM_BLOCK_PENDING_FREE: return "active_pending_free";
    default: return "inactive";
  }
}

// Stacks are symbolized in one batch at the end, each into its dict as a
// list of {"filename", "line", "name"}, innermost first; a frame shared by
// several stacks is one dict.
class Frames {
 public:
  void add(py::dict& d, const std::shared_ptr<c10::GatheredContext>& context) {
    if (!context) {
      d["frames"] = py::list();
      return;
    }
    torch::CapturedTraceback* tb = torch::getCapturedTracebackFromContext(context);
    auto [it, added] = index_.emplace(tb, unique_.size());
    if (added) unique_.push_back(tb);
    dest_.emplace_back(d, it->second);
  }
  void resolve() {
    const torch::SymbolizedTracebacks s = torch::symbolize(unique_);
    std::vector<py::dict> frames;
    frames.reserve(s.all_frames.size());
    for (const auto& f : s.all_frames) {
      py::dict d;
      d["filename"] = f.filename;
      d["line"] = f.lineno;
      d["name"] = f.funcname;
      frames.push_back(std::move(d));
    }
    std::vector<py::list> stacks;
    for (const auto& t : s.tracebacks) {
      py::list stack;
      for (uint64_t k : t) stack.append(frames.at(k));
      stacks.push_back(std::move(stack));
    }
    for (auto& [d, i] : dest_) d["frames"] = stacks.at(i);
  }

 private:
  std::unordered_map<torch::CapturedTraceback*, size_t> index_;
  std::vector<torch::CapturedTraceback*> unique_;
  std::vector<std::pair<py::dict, size_t>> dest_;
};

// Streams as Python sees them: the c10 StreamId (0: the default stream).
class StreamNames {
 public:
  int64_t operator()(int device, uint64_t native_id) {
    if (native_id == 0) return 0;
    auto key = std::make_pair(device, native_id);
    auto it = names_.find(key);
    if (it == names_.end())
      it = names_.emplace(key, stream_id_of_native(static_cast<c10::DeviceIndex>(device),
                                                   native_id)).first;
    return it->second;
  }

 private:
  std::map<std::pair<int, uint64_t>, int64_t> names_;
};

py::dict allocator_settings() {
  loom_device_props p{};
  check(loom_device_properties(0, &p), "_snapshot");
  py::dict d;
  d["memory_limit"] = p.total_memory;  // LOOM_MEMORY_LIMIT, per device
  d["max_split_size"] = -1;
  d["expandable_segments"] = false;
  d["garbage_collection_threshold"] = 0.0;
  d["round_size"] = 512;
  d["small_pool_limit"] = 1 << 20;
  return d;
}

py::dict memory_snapshot() {
  const int devices = static_cast<int>(device_count());
  std::vector<std::vector<Segment>> segments(devices);
  HistoryStacks history;
  {
    py::gil_scoped_release no_gil;
    std::vector<size_t> active(devices, 0);
    for (int d = 0; d < devices; ++d) {
      check(loom_memory_snapshot(d, copy_segment, &segments[d]), "_snapshot");
      for (const Segment& s : segments[d]) active[d] += s.info.active_size;
    }
    history = memory_history_copy(active);
  }
  std::unordered_map<uintptr_t, std::shared_ptr<c10::GatheredContext>> block_stacks(
      history.blocks.begin(), history.blocks.end()),
      segment_stacks(history.segments.begin(), history.segments.end());
  auto stack_of = [](const auto& map, uintptr_t addr) {
    auto it = map.find(addr);
    return it == map.end() ? std::shared_ptr<c10::GatheredContext>() : it->second;
  };
  Frames frames;
  StreamNames stream_names;

  py::list segment_list;
  for (int d = 0; d < devices; ++d) {
    for (const Segment& s : segments[d]) {
      py::dict seg;
      seg["device"] = s.info.device;
      seg["address"] = s.info.address;
      seg["total_size"] = s.info.total_size;
      seg["allocated_size"] = s.info.allocated_size;
      seg["active_size"] = s.info.active_size;
      seg["requested_size"] = s.info.requested_size;
      seg["stream"] = stream_names(s.info.device, s.info.stream_id);
      seg["segment_type"] = s.info.pool == LOOM_POOL_LARGE ? "large" : "small";
      seg["segment_pool_id"] = py::make_tuple(0, 0);
      seg["is_expandable"] = false;
      frames.add(seg, stack_of(segment_stacks, s.info.address));
      py::list blocks;
      for (const loom_memory_block_info& b : s.blocks) {
        py::dict block;
        block["address"] = b.address;
        block["size"] = b.size;
        block["requested_size"] = b.requested_size;
        block["state"] = block_state(b.state);
        frames.add(block, b.state == LOOM_BLOCK_INACTIVE ? nullptr : stack_of(block_stacks, b.address));
        blocks.append(std::move(block));
      }
      seg["blocks"] = std::move(blocks);
      segment_list.append(std::move(seg));
    }
  }

  py::list traces;
  for (const auto& trace : history.traces) {
    py::list entries;
    for (const HistoryEntry& e : trace) {
      py::dict entry;
      entry["action"] = history_action_name(e.action);
      entry[e.action == HistoryAction::kOom ? "device_free" : "addr"] = e.addr;
      entry["size"] = e.size;
      entry["stream"] = stream_names(e.device, e.stream_id);
      entry["time_us"] = e.time_us;
      frames.add(entry, e.context);
      entries.append(std::move(entry));
    }
    traces.append(std::move(entries));
  }
  frames.resolve();

  py::dict result;
  result["segments"] = std::move(segment_list);
  result["device_traces"] = std::move(traces);
  result["allocator_settings"] = allocator_settings();
  return result;
}

}  // namespace

void init_memory(py::module& m) {
  m.def(
      "_record_memory_history",
      [](std::optional<std::string> enabled, std::optional<std::string> context,
         const std::string& stacks, size_t max_entries, bool clear_history,
         const std::vector<std::string>& skip_actions) {
        memory_history_configure(enabled, context, stacks, max_entries, clear_history,
                                 skip_actions);
      },
      py::arg("enabled"), py::arg("context"), py::arg("stacks"), py::arg("max_entries"),
      py::arg("clear_history"), py::arg("skip_actions"));
  m.def("_memory_history_enabled", [] { return memory_history_enabled(); });
  m.def("_memory_snapshot", &memory_snapshot);
}

}  // namespace torch_loom::python
