// Graph capture and replay for PyTorch: at::GraphImplInterface on loom's
// runtime graphs (loom/graph.h), which serves torch.accelerator.Graph and
// torch.loom.Graph alike; plus the pool handles and the capture query of
// torch.loom.
#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/Generator.h>

#include <fstream>
#include <optional>

#include "common.h"
#include "loom/graph.h"
#include "python/bindings.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

// A pool id from a MempoolId_t: loom's graphs hand out {id, 0}, and
// torch.loom.graph_pool_handle() gives {0, id}.
uint64_t pool_id(const at::MempoolId_t& pool) {
  return static_cast<uint64_t>(pool.first != 0 ? pool.first : pool.second);
}

class LoomGraph final : public at::GraphImplInterface {
 public:
  explicit LoomGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~LoomGraph() override { release(); }

  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode) override {
    TORCH_CHECK(stream_ == nullptr, "capture_begin: this graph is capturing already");
    TORCH_CHECK(graph_ == nullptr && exec_ == nullptr,
                "capture_begin: this graph holds a capture; call reset() before capturing again");
    device_ = current_device();
    loom_stream_t* stream = native_stream(get_current_stream(device_));
    const uint64_t id = pool.first || pool.second ? pool_id(pool) : loom_graph_pool_new();
    auto* gen = at::check_generator<LoomGenerator>(default_generator(device_));
    gen->register_graph();  // the state cell, allocated before the capture
    check(loom_stream_begin_capture(stream, id), "capture_begin");
    try {
      gen->capture_prologue();
    } catch (...) {
      loom_graph_t* graph = nullptr;
      (void)loom_stream_end_capture(stream, &graph);
      loom_graph_release(graph);
      throw;
    }
    generator_ = gen;
    rng_increment_ = 0;
    stream_ = stream;
    pool_ = id;
  }

  void capture_end() override {
    TORCH_CHECK(stream_ != nullptr, "capture_end: capture_begin was not called");
    loom_stream_t* stream = stream_;
    stream_ = nullptr;  // the capture ends whatever the outcome
    rng_increment_ = generator_->capture_epilogue();
    loom_graph_t* graph = nullptr;
    check(loom_stream_end_capture(stream, &graph), "capture_end");
    graph_ = graph;
    if (!keep_graph_) {
      instantiate();
      loom_graph_release(graph_);
      graph_ = nullptr;
    }
  }

  void instantiate() override {
    TORCH_CHECK(graph_ != nullptr || exec_ != nullptr, "instantiate: nothing was captured");
    if (graph_ == nullptr) return;  // instantiated already, the graph let go
    loom_graph_exec_t* exec = nullptr;
    check(loom_graph_instantiate(graph_, &exec), "instantiate");
    loom_graph_exec_release(exec_);
    exec_ = exec;
  }

  void replay() override {
    TORCH_CHECK(stream_ == nullptr, "replay: the graph is still capturing");
    if (exec_ == nullptr) instantiate();
    // The generator's state for this replay's random ops, written on the
    // replaying stream before them; the generator moves past what they draw.
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_));
    if (rng_increment_ != 0) generator_->replay_prologue(rng_increment_);
    check(loom_graph_launch(exec_, native_stream(get_current_stream(device_))), "replay");
  }

  void reset() override { release(); }

  at::MempoolId_t pool() const override {
    TORCH_CHECK(pool_ != 0, "pool: the graph has not begun a capture");
    return {static_cast<at::CaptureId_t>(pool_), 0};
  }

  void enable_debug_mode() override { debug_ = true; }

  // One line per recorded command: its index and name.
  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "debug_dump: call enable_debug_mode() before capturing");
    const loom_graph_t* g = graph_ ? graph_ : loom_graph_exec_graph(exec_);
    TORCH_CHECK(g != nullptr, "debug_dump: nothing was captured");
    std::ofstream out(path);
    TORCH_CHECK(out, "debug_dump: cannot write ", path);
    out << "loom graph: " << loom_graph_num_commands(g) << " commands, pool " << pool_ << "\n";
    for (size_t i = 0; i < loom_graph_num_commands(g); ++i)
      out << i << " " << loom_graph_command_name(g, i) << "\n";
  }

 private:
  void release() {
    if (stream_ != nullptr) {  // reset() while capturing: drop the capture
      (void)generator_->capture_epilogue();
      loom_graph_t* graph = nullptr;
      (void)loom_stream_end_capture(stream_, &graph);
      loom_graph_release(graph);
      stream_ = nullptr;
    }
    // Waits for queued replays, then gives back the graph's pool share.
    std::optional<py::gil_scoped_release> no_gil;
    if (PyGILState_Check()) no_gil.emplace();
    loom_graph_exec_release(exec_);
    loom_graph_release(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    rng_increment_ = 0;
  }

  bool keep_graph_;
  bool debug_ = false;
  c10::DeviceIndex device_ = 0;
  loom_stream_t* stream_ = nullptr;  // while capturing
  uint64_t pool_ = 0;
  loom_graph_t* graph_ = nullptr;
  loom_graph_exec_t* exec_ = nullptr;
  LoomGenerator* generator_ = nullptr;  // the device's default generator (never freed)
  uint64_t rng_increment_ = 0;          // the counters a replay's random ops use
};

void register_graph_impl(const std::string& key) {
  if (!at::GraphImplRegistry()->Has(key))
    at::GraphImplRegistry()->Register(key, [](const at::GraphImplArgs& args) {
      return std::unique_ptr<at::GraphImplInterface>(new LoomGraph(args));
    });
}

// The loom generator behind a torch.Generator, for a graph's
// register_generator_state.
LoomGenerator* loom_generator(py::handle obj) {
  TORCH_CHECK(THPGenerator_Check(obj.ptr()), "register_generator_state: expected a torch.Generator");
  const at::Generator& gen = reinterpret_cast<THPGenerator*>(obj.ptr())->cdata;
  TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1,
              "register_generator_state: expected a loom generator, got one of ", gen.device());
  return at::check_generator<LoomGenerator>(gen);
}

}  // namespace

void init_graph(py::module& m) {
  // Generators a graph registers besides its device's default one
  // (torch.loom.Graph.register_generator_state).
  // False for a device's default generator, which every capture registers.
  m.def("_generator_register_graph", [](py::handle g) {
    LoomGenerator* gen = loom_generator(g);
    if (gen == at::check_generator<LoomGenerator>(default_generator(gen->device().index())))
      return false;
    gen->register_graph();
    return true;
  });
  m.def("_generator_capture_prologue", [](py::handle g) { loom_generator(g)->capture_prologue(); });
  m.def("_generator_capture_epilogue",
        [](py::handle g) { return loom_generator(g)->capture_epilogue(); });
  m.def("_generator_replay_prologue", [](py::handle g, uint64_t increment) {
    loom_generator(g)->replay_prologue(increment);
  });
  // The registry is keyed by the device type's name: "PrivateUse1" now,
  // "LOOM" once torch_loom has renamed the backend (which it does after
  // loading this module), and whatever it is when torch.loom asks again.
  register_graph_impl("PrivateUse1");
  register_graph_impl("LOOM");
  m.def("_register_graph_impl", [] {
    register_graph_impl(c10::DeviceTypeName(c10::DeviceType::PrivateUse1, false));
  });
  m.def("_graph_pool_handle", [] { return loom_graph_pool_new(); });
  m.def("_is_current_stream_capturing", [] {
    const c10::DeviceIndex d = current_device();
    return loom_stream_is_capturing(native_stream(get_current_stream(d))) != 0;
  });
}

}  // namespace torch_loom::python
